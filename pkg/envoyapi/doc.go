// Package envoyapi adapts Envoy's gRPC services to the project's domain:
// the Rate Limit Service v3 (ShouldRateLimit) over pkg/policy and
// pkg/limiter, its JSON twin for curl, and the external processor
// (ext_proc) that applies targets' fallback chains, breakers, limits and
// concurrency caps to LLM and API traffic in two roles (downstream, before
// the router; upstream, once per attempt). It is the only package that
// imports go-control-plane; errors become gRPC statuses in one place
// (status.go).
//
// Servers are built with their collaborators as interfaces (the policies
// in force, the decider) and options (logger, meter provider). They are
// safe for concurrent use and hold no goroutines of their own.
package envoyapi
