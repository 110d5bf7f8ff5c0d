// Package xdsconfig keeps a policy.Snapshot current from an xDS server,
// as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW (and as
// Envoy Gateway configures it).
//
// A Client holds one ADS state-of-the-world stream
// (envoy.service.discovery.v3.AggregatedDiscoveryService) subscribed, by
// wildcard, to resources of type TypeURL
// (ratelimit.config.ratelimit.v3.RateLimitConfig). Every response is the
// complete set of domains. Each resource becomes the envoyproxy/ratelimit
// YAML document it stands for, and the documents, named after their
// resources, are compiled by policy.CompileWith with Options.Load: the
// snapshot is the one the same files would give, loaded with the same
// options, with the same rules and problems.
//
// A response is applied whole or not at all. If any resource cannot be
// decoded, or the set has any Error problem (a dropped block, a duplicate
// domain…), the response is NACKed with the problems as its error_detail
// and the last good version_info, and the last good set stays current.
// Otherwise it is ACKed and published; its warnings are logged. A server
// may resend at once what was NACKed (go-control-plane's snapshot cache
// does, until it has a newer version): such resends are NACKed again
// after a pause growing to a second, without being logged again.
//
// When the stream ends the client reconnects with jittered exponential
// backoff, reset by a stream on which a response arrived, and sends the
// version it holds, so a server that has nothing newer need not resend.
//
// Current never blocks and is safe for concurrent use; before the first
// good response it returns an empty snapshot, and the channel Ready
// returns is still open. Run owns the stream and returns when its context
// ends.
package xdsconfig
