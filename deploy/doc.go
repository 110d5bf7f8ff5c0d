// Package deploy holds the operations files of ratelimit-svc: the
// Prometheus configuration and Grafana dashboard of the docker-compose
// demo, the demo's extra policies, and the tests that check every
// deployment manifest of the repository (envoy/k8s, envoy/istio, the
// Dockerfile, docker-compose.yml) against the Envoy API types, the
// service's policies and each other.
package deploy
