// Package routing decides which target of a fallback chain serves a
// request and how a target's attempts are retried. It knows the targets
// of a policy snapshot, the limiter (request rates, token budgets,
// concurrency slots) and the circuit breakers, and no wire protocol: the
// ext_proc server of pkg/envoyapi calls it from both of its roles.
//
// The model:
//
//   - Requested names the target a request asks for (a header's value,
//     else the body's model: a target's name, then a target's model).
//   - Router.Choose walks the target's fallback chain depth first
//     (resilience.Expand) and admits the first hop whose breakers,
//     concurrency cap, rate limit and token budget all let it serve.
//     Admitting takes what serving needs (a breaker probe, a slot, one
//     request of the rate limit); a hop refused by a later check gives
//     back what it took, so a refused hop consumes nothing. Every hop
//     visited is reported with its reason (Choice.Walk), and a chain
//     without a serving hop is described by Choice.Refusal.
//     A Scope narrows a walk to the hops of one Envoy cluster (an
//     attempt's), names a hop the request holds already, and carries the
//     request's token estimate: a hop whose context_window is smaller is
//     skipped (context_window), and the serving hop reserves the estimate
//     (Scope.Reserve) from its token budget (a budget that cannot take it skips the hop,
//     token_limit). Router.Reconcile settles a reservation with the usage
//     the response reported (a charge past the budget is kept as debt, a
//     smaller usage is refunded).
//   - Router.Alternative looks along the same chain without taking
//     anything: whether another hop could serve right now.
//   - Router.Next applies a target's retry_config (RetryPolicy) to an
//     attempt's verdict: retry the target, move to an alternative at once
//     (which an interactive target prefers to waiting, and any target
//     does once it may not retry), or stop; and how long to skip the
//     target. A context-length error moves only to a larger window.
//
// The zero value of Router is not usable: build one with New. A Deps
// field left nil turns its concern off (no limits, no caps, no
// breakers). A Router holds no state of its own and is safe for
// concurrent use; a Choice belongs to the request that made it.
package routing
