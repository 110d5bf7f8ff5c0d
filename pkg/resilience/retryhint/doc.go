// Package retryhint reads how long an upstream asked a client to wait
// before trying again, from every form LLM providers and HTTP standards
// send, and never reads a wait shorter than the one meant.
//
// The model: a response offers hints in three tiers, direct (Retry-After
// as seconds or an HTTP-date, retry-after-ms and its vendor spellings,
// grpc-retry-pushback-ms, google.rpc.RetryInfo in the body), rate-limit
// windows of exhausted dimensions (x-ratelimit-reset-*, anthropic
// resets, the IETF RateLimit field, X-RateLimit-Reset), and the error
// message's text. Parse reads the headers and a Body, the parts of an
// error body the caller has already decoded, and reports the largest
// valid hint of the first tier that holds one. Numbers are read exactly
// and rounded up to the nanosecond; dates become waits against the time
// the caller passes in; a wait is never negative and at most [Max].
// Forbids reports the one form that forbids a retry outright.
//
// Zero values: a nil Headers and a zero Body carry no hint. Parse and
// Forbids keep no state, read no clock and are safe for concurrent use;
// they never panic on any input.
package retryhint
