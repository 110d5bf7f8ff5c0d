// Package limiter decides whether a unit of work for a key may proceed under
// a Rule of one or more windows (fixed window, sliding window or token
// bucket), and tells the caller what to put in rate-limit headers.
//
// Model. State is kept per key; every window of the key's Rule must admit a
// request for it to be admitted. The window maths are pure functions of
// (state, now, n) in window.go; a Limiter reads its Clock once per call and
// passes the instant down. Windows are aligned to the Unix epoch. A denied
// request charges nothing unless its Rule sets AlwaysCharge, and a batch of
// requests passed to one Decide call is admitted or denied as a whole.
//
// Retry-After. A denial carries the exact time until every window admits
// the request's units again; a retry at that instant is admitted unless
// other traffic spent the budget first. It never undershoots.
//
// Memory. Keys whose state has returned to "fresh" (their windows passed,
// their bucket refilled) are evicted by Run, so memory is bounded by the keys
// active within their windows, not by every key ever seen.
//
// Concurrency. A Limiter is safe for concurrent use. Keys live in a sharded
// table: a lookup takes a shard's read lock, a decision takes its key's own
// lock, and no lock is shared by all keys. The zero Limiter is not usable;
// build one with New.
package limiter
