package resilience

import (
	"sync"
	"time"
)

// Target names an upstream target and the provider tier it belongs to.
// Targets with the same Provider and APIHost share a provider breaker; an
// empty Provider means the target has no provider tier.
type Target struct {
	Name     string
	Provider string
	APIHost  string
}

func (t Target) providerKey() string {
	if t.Provider == "" {
		return ""
	}
	return t.Provider + "|" + t.APIHost
}

// Admission answers whether a target may be tried now.
type Admission struct {
	Allowed bool
	Reason  SkipReason // why not: SkipBreakerOpen or SkipRateLimited
	Tier    Tier       // which tier refused
	Until   time.Time  // when it may be asked again
	Probe   bool       // the request is a half-open probe: report its outcome
}

// RegistryOption configures a Registry.
type RegistryOption func(*Registry)

// WithStateChange calls fn on every breaker state change, after the
// breaker's lock is released, so fn may call the Registry. Calls for
// different breakers may run concurrently.
func WithStateChange(fn func(BreakerEvent)) RegistryOption {
	return func(r *Registry) { r.onChange = fn }
}

// Registry keeps the two breaker tiers of every target and provider, and
// the targets' skips. Breakers are created on first use. Per target: 5
// counted failures within 60 s open the breaker for 30 s; then one probe
// at a time is let through, and a probe whose outcome is never reported
// is replaced after another open period. Per provider (provider + API
// host): the same numbers, but it opens only when at least 2 distinct
// targets have counted failures in the window. A verdict's
// SkipFor skips its target for exactly that long. Cancellations, the
// caller's errors and throttling with a hint are not counted.
//
// The zero Registry is not usable; call NewRegistry. A Registry is safe
// for concurrent use. It reads the clock with time.Now (gobreaker does
// too), so tests run it under testing/synctest.
type Registry struct {
	cfg      breakerConfig
	onChange func(BreakerEvent)

	mu        sync.Mutex
	targets   map[string]*breaker
	providers map[string]*breaker
}

// NewRegistry returns an empty registry.
func NewRegistry(opts ...RegistryOption) *Registry {
	r := &Registry{
		cfg:       breakerConfig{}.withDefaults(),
		targets:   map[string]*breaker{},
		providers: map[string]*breaker{},
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

func (r *Registry) breakers(t Target) (tb, pb *breaker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tb = r.targets[t.Name]
	if tb == nil {
		tb = newBreaker(TierTarget, t.Name, r.cfg)
		r.targets[t.Name] = tb
	}
	if key := t.providerKey(); key != "" {
		pb = r.providers[key]
		if pb == nil {
			pb = newBreaker(TierProvider, key, r.cfg)
			r.providers[key] = pb
		}
	}
	return tb, pb
}

func (r *Registry) emit(events []BreakerEvent) {
	if r.onChange == nil {
		return
	}
	for _, e := range events {
		r.onChange(e)
	}
}

// Allow asks whether t may be tried now. When a breaker is half-open, a
// granted request takes its single probe slot: report the outcome with
// Record, or give the slot back with Release.
func (r *Registry) Allow(t Target) Admission {
	now := time.Now()
	tb, pb := r.breakers(t)
	var skipped time.Time
	r.emit(tb.locked(func() {
		if tb.skipUntil.After(now) {
			skipped = tb.skipUntil
		}
	}))
	if !skipped.IsZero() {
		return Admission{Reason: SkipRateLimited, Tier: TierTarget, Until: skipped}
	}
	var a Admission
	if pb != nil {
		r.emit(pb.locked(func() {
			ok, probe, until := pb.admit(t.Name, now)
			a = Admission{Allowed: ok, Probe: probe, Until: until}
		}))
		if !a.Allowed {
			return Admission{Reason: SkipBreakerOpen, Tier: TierProvider, Until: a.Until}
		}
	}
	var ta Admission
	r.emit(tb.locked(func() {
		ok, probe, until := tb.admit(t.Name, now)
		ta = Admission{Allowed: ok, Probe: probe || a.Probe, Until: until}
	}))
	if !ta.Allowed {
		if pb != nil {
			r.emit(pb.locked(func() { pb.release(t.Name) }))
		}
		return Admission{Reason: SkipBreakerOpen, Tier: TierTarget, Until: ta.Until}
	}
	return ta
}

// Status is Allow without taking a probe slot: whether t would be
// allowed now, and if not, why and until when.
func (r *Registry) Status(t Target) Admission {
	now := time.Now()
	tb, pb := r.breakers(t)
	var a Admission
	r.emit(tb.locked(func() {
		if tb.skipUntil.After(now) {
			a = Admission{Reason: SkipRateLimited, Tier: TierTarget, Until: tb.skipUntil}
			return
		}
		if ok, until := tb.peek(now); !ok {
			a = Admission{Reason: SkipBreakerOpen, Tier: TierTarget, Until: until}
			return
		}
		a.Allowed = true
	}))
	if !a.Allowed || pb == nil {
		return a
	}
	r.emit(pb.locked(func() {
		if ok, until := pb.peek(now); !ok {
			a = Admission{Reason: SkipBreakerOpen, Tier: TierProvider, Until: until}
		}
	}))
	return a
}

// Record reports the outcome of an attempt on t. A success (a verdict
// that has not Failed) counts as a success on both tiers; CountTarget and
// CountProvider count a failure on their tier; anything else is excluded.
// SkipFor > 0 skips t until now+SkipFor (a longer skip already set stays).
// If t holds a probe slot, this outcome is the probe's.
func (r *Registry) Record(t Target, v Verdict) {
	now := time.Now()
	tb, pb := r.breakers(t)
	r.emit(tb.locked(func() {
		if v.SkipFor > 0 {
			tb.skipUntil = later(tb.skipUntil, now.Add(v.SkipFor))
		}
		tb.record(t.Name, outcome(v, v.CountTarget), now)
	}))
	if pb != nil {
		r.emit(pb.locked(func() { pb.record(t.Name, outcome(v, v.CountProvider), now) }))
	}
}

// Release gives back a probe slot that t took in Allow but did not use.
func (r *Registry) Release(t Target) {
	tb, pb := r.breakers(t)
	r.emit(tb.locked(func() { tb.release(t.Name) }))
	if pb != nil {
		r.emit(pb.locked(func() { pb.release(t.Name) }))
	}
}

func outcome(v Verdict, counted bool) error {
	switch {
	case !v.Failed():
		return nil
	case counted:
		return errCounted
	}
	return errExcluded
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
