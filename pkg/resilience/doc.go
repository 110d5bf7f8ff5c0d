// Package resilience decides what to do when an upstream call fails:
// whether to retry the same target and after how long, whether to fail
// over to the next hop of a fallback chain, and what the failure means for
// the target's and the provider's circuit breakers.
//
// The model has four parts, each usable alone:
//
//   - Classify turns an attempt's outcome (status, transport error kind,
//     headers, JSON error body, whether bytes were already forwarded) into
//     a Verdict: retry or not, fail over or not, which breakers count it,
//     the upstream's retry hint (read by package retryhint), how long to
//     skip the target, and a Class name for metrics. Provider patterns
//     are data in tables, not code.
//   - A Policy, built from a Profile (Standard or Interactive) and a random
//     source, is a pure function from verdict and Attempt (retries made,
//     the time, the deadline) to a Step: retry after a delay, fail over,
//     fail, abort. The caller owns the timer and the context.
//   - A Registry keeps two tiers of circuit breakers (per target, and per
//     provider and API host) on sony/gobreaker, plus per-target skips from
//     retry hints and quotas.
//   - Expand lists a target's fallback chain depth first; Walk asks a
//     caller's check about each hop and reports how the chain ended.
//
// Time and randomness come in as arguments: Classify and Policy.Plan take
// the current time, NewPolicy takes the random source (nil disables
// jitter), and no package-level random source exists. Registry reads the
// clock with time.Now, as gobreaker does; tests run it under
// testing/synctest.
//
// Zero values: a zero Verdict is a success; a zero Input with a zero Now
// classifies as a transport failure; Registry and Policy need their
// constructors. Classify, Expand and Walk are safe for concurrent use; a
// Policy is when its random source is; a Registry always is.
package resilience
