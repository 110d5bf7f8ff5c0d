// Package envoyapi adapts Envoy's gRPC services to the project's domain:
// the Rate Limit Service v3 (ShouldRateLimit) over pkg/policy and
// pkg/limiter, and its JSON twin for curl. It is the only package that
// imports go-control-plane; errors become gRPC statuses in one place
// (status.go).
//
// Servers are built with their collaborators as interfaces (the policies
// in force, the decider) and options (logger, meter provider). They are
// safe for concurrent use and hold no goroutines of their own.
package envoyapi
