package routing

import (
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// Decider decides a batch of limiter requests; *limiter.Limiter is one.
type Decider interface {
	Decide(reqs []limiter.Request, out []limiter.Result) (bool, error)
}

// Slots hands out concurrency slots and tells how many are taken;
// *limiter.Limiter is one.
type Slots interface {
	Acquire(key string, max uint64) (*limiter.Slot, bool)
	InUse(key string) uint64
}

// Breakers admits targets and learns from their outcomes;
// *resilience.Registry is one.
type Breakers interface {
	Allow(t resilience.Target) resilience.Admission
	Status(t resilience.Target) resilience.Admission
	Release(t resilience.Target)
	Record(t resilience.Target, v resilience.Verdict)
}

// Deps are a Router's collaborators. A nil field turns its concern off:
// no rate or token limits, no concurrency caps, no breakers.
type Deps struct {
	// Limits decides the targets' rate limits and charges their token
	// budgets.
	Limits Decider
	// Slots caps the targets' in-flight requests.
	Slots Slots
	// Breakers keeps the target and provider circuit breakers.
	Breakers Breakers
	// Now tells the time for retry decisions; nil means time.Now.
	Now func() time.Time
}

// Router chooses serving hops and plans retries over its Deps.
type Router struct {
	deps Deps
}

// New builds a Router over deps.
func New(deps Deps) *Router {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Router{deps: deps}
}

// Now is the time as the Router's clock tells it.
func (r *Router) Now() time.Time { return r.deps.Now() }

// Record feeds t's breakers with an attempt's verdict.
func (r *Router) Record(t *policy.Target, v resilience.Verdict) {
	if r.deps.Breakers != nil {
		r.deps.Breakers.Record(BreakerTarget(t), v)
	}
}

// Requested is the target a request names: header when it is set (a
// target name), else model, the body's model (a target's name, then a
// target's model). It is nil when neither names a known target.
func Requested(snap *policy.Snapshot, header, model string) *policy.Target {
	switch {
	case header != "":
		return snap.Target(header)
	case model == "":
		return nil
	}
	if t := snap.Target(model); t != nil {
		return t
	}
	return snap.TargetByModel(model)
}

// BreakerTarget names t for the breakers: its own tier and its
// provider's.
func BreakerTarget(t *policy.Target) resilience.Target {
	return resilience.Target{Name: t.Name, Provider: t.Provider, APIHost: t.APIHost}
}

// Limiter keys of a target: "target|<name>|<fingerprint>" for its request
// rate, "target|<name>|tokens|<fingerprint>" for its token budget, and
// "target|<name>" for its concurrency slots. An RLS key's second part is a
// descriptor entry with an unescaped '=', so the two never collide.

// RateKey is the key of t's request rate limit; t.RateLimit must be set.
func RateKey(t *policy.Target) []byte {
	return limiter.AppendPart(targetKey(t.Name), t.RateLimit.Fingerprint())
}

// TokenKey is the key of t's token budget; t.TokenLimit must be set.
func TokenKey(t *policy.Target) []byte {
	return limiter.AppendPart(limiter.AppendPart(targetKey(t.Name), "tokens"), t.TokenLimit.Fingerprint())
}

// SlotKey is the concurrency key of a target, as passed to Slots.Acquire:
// operators and tests read InUse with it.
func SlotKey(target string) string { return string(targetKey(target)) }

func targetKey(name string) []byte {
	return limiter.AppendPart(limiter.AppendPart(make([]byte, 0, 64), "target"), name)
}
