// Package envoyapi adapts Envoy's gRPC services to the project's domain:
// the Rate Limit Service v3 (ShouldRateLimit) over pkg/policy and
// pkg/limiter, its JSON twin for curl, and the external processor
// (ext_proc) that applies targets' fallback chains, breakers, limits and
// concurrency caps to LLM and API traffic in two roles (downstream, before
// the router; upstream, once per attempt). It is the only package that
// imports go-control-plane; errors become gRPC statuses in one place
// (errors.go).
//
// Files follow one naming scheme: rls_*.go serve the RLS, extproc_*.go
// the external processor, and the unprefixed files are shared by both
// (options, header names and seconds rounding, errors). The routing
// decisions of ext_proc (which hop of a chain serves, how a target's
// attempts are retried, which cluster the next attempt goes to, token
// reservations) are pkg/routing's; this package turns them into Envoy's
// messages. The downstream role reads each response's token usage as it
// passes (pkg/llmusage: a whole JSON body, or an event stream chunk by
// chunk) to settle the request's token reservation, writes the counts as
// dynamic metadata, and feeds the breakers with error events in streams
// and with the router's replies for upstreams that never answered.
//
// Servers are built with their collaborators as interfaces (the policies
// in force, the decider) and options (logger, meter provider, response
// headers, charging mode, dynamic metadata, the cap on per-limit metric
// labels); the zero value of every option is this service's default. They
// are safe for concurrent use and hold no goroutines of their own.
//
// The RLS decides a request's descriptors as one batch: by default a
// denied request consumes nothing. Charging (WithCharging) switches to
// envoyproxy/ratelimit's charging; quota-mode descriptors, global shadow
// mode (policy.LoadOptions) follow envoyproxy/ratelimit as Envoy Gateway
// relies on it, and usage reports sent at stream end (every descriptor
// with its own hits_addend) are recorded in full whatever the limits say.
package envoyapi
