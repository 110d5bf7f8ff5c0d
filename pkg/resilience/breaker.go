package resilience

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerState is a breaker's state.
type BreakerState uint8

// The breaker states.
const (
	BreakerClosed   BreakerState = iota // requests flow, failures are counted
	BreakerHalfOpen                     // one probe at a time decides
	BreakerOpen                         // requests are refused until the open period ends
)

var breakerStateNames = [...]string{"closed", "half-open", "open"}

// String returns the state's name.
func (s BreakerState) String() string {
	if int(s) < len(breakerStateNames) {
		return breakerStateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

func stateOf(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	case gobreaker.StateOpen:
		return BreakerOpen
	}
	return BreakerClosed
}

// Tier says which breaker of a target spoke.
type Tier uint8

// The breaker tiers.
const (
	TierNone     Tier = iota
	TierTarget        // the target's own breaker or skip
	TierProvider      // the breaker shared by a provider's targets on one API host
)

var tierNames = [...]string{"none", "target", "provider"}

// String returns the tier's name.
func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// breakerConfig holds the breaker numbers of resilience.md. A zero field
// means its default.
type breakerConfig struct {
	Failures     int           // counted failures that open a breaker; default 5
	Window       time.Duration // the failures must fall within it; default 60 s
	OpenFor      time.Duration // open period, and the age after which an unreported probe is replaced; default 30 s
	ProviderSpan int           // distinct failing targets a provider breaker needs to open; default 2
}

func (c breakerConfig) withDefaults() breakerConfig {
	if c.Failures <= 0 {
		c.Failures = 5
	}
	if c.Window <= 0 {
		c.Window = 60 * time.Second
	}
	if c.OpenFor <= 0 {
		c.OpenFor = 30 * time.Second
	}
	if c.ProviderSpan <= 0 {
		c.ProviderSpan = 2
	}
	return c
}

// BreakerEvent reports a breaker's state change.
type BreakerEvent struct {
	Tier     Tier
	Name     string // the target name, or the provider key "provider|api host"
	From, To BreakerState
	At       time.Time
}

// Outcomes as gobreaker sees them.
var (
	errCounted  = errors.New("counted failure")
	errExcluded = errors.New("excluded outcome")
)

// breaker is one gobreaker two-step breaker with the bookkeeping
// gobreaker leaves to its user: the open period's end, the single
// half-open probe, the provider's failing targets and the target's skip.
// Every field, and every call into cb, is guarded by mu; gobreaker's
// callbacks run inside those calls.
type breaker struct {
	tier Tier
	name string
	cfg  breakerConfig

	mu         sync.Mutex
	cb         *gobreaker.TwoStepCircuitBreaker[struct{}]
	openUntil  time.Time
	probe      func(error)
	probeOwner string
	probeAt    time.Time
	failing    map[string]time.Time // provider tier: target → last counted failure
	skipUntil  time.Time            // target tier: skip set by a hint or quota
	events     []BreakerEvent       // state changes not yet delivered
}

func newBreaker(tier Tier, name string, cfg breakerConfig) *breaker {
	b := &breaker{tier: tier, name: name, cfg: cfg}
	const buckets = 60
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          name,
		MaxRequests:   1,
		Interval:      cfg.Window,
		BucketPeriod:  max(cfg.Window/buckets, time.Millisecond),
		Timeout:       cfg.OpenFor,
		ReadyToTrip:   b.readyToTrip,
		OnStateChange: b.onStateChange,
		IsExcluded:    func(err error) bool { return errors.Is(err, errExcluded) },
	})
	if tier == TierProvider {
		b.failing = map[string]time.Time{}
	}
	return b
}

// readyToTrip runs inside a cb call, so b.mu is held.
func (b *breaker) readyToTrip(c gobreaker.Counts) bool {
	if int(c.TotalFailures) < b.cfg.Failures {
		return false
	}
	return b.tier != TierProvider || b.failingTargets(time.Now()) >= b.cfg.ProviderSpan
}

// onStateChange runs inside a cb call, so b.mu is held.
func (b *breaker) onStateChange(_ string, from, to gobreaker.State) {
	now := time.Now()
	if to == gobreaker.StateOpen {
		b.openUntil = now.Add(b.cfg.OpenFor)
	}
	b.events = append(b.events, BreakerEvent{Tier: b.tier, Name: b.name, From: stateOf(from), To: stateOf(to), At: now})
}

func (b *breaker) failingTargets(now time.Time) int {
	for t, at := range b.failing {
		if now.Sub(at) >= b.cfg.Window {
			delete(b.failing, t)
		}
	}
	return len(b.failing)
}

// replaceStaleProbe gives up on a probe unreported for an open period, so
// a new one may go.
func (b *breaker) replaceStaleProbe(now time.Time) {
	if b.probe != nil && now.Sub(b.probeAt) >= b.cfg.OpenFor {
		b.probe(errExcluded)
		b.probe = nil
	}
}

// admit asks to send a request. In half-open state a granted request is
// the probe. until is when a refused request may ask again.
func (b *breaker) admit(owner string, now time.Time) (ok, probe bool, until time.Time) {
	b.replaceStaleProbe(now)
	done, err := b.cb.Allow()
	if err != nil {
		return false, false, b.until()
	}
	if b.cb.State() == gobreaker.StateHalfOpen {
		b.probe, b.probeOwner, b.probeAt = done, owner, now
		return true, true, time.Time{}
	}
	return true, false, time.Time{}
}

// peek is admit without taking anything.
func (b *breaker) peek(now time.Time) (ok bool, until time.Time) {
	b.replaceStaleProbe(now)
	switch b.cb.State() {
	case gobreaker.StateOpen:
		return false, b.until()
	case gobreaker.StateHalfOpen:
		if b.probe != nil {
			return false, b.until()
		}
	}
	return true, time.Time{}
}

func (b *breaker) until() time.Time {
	if b.cb.State() == gobreaker.StateHalfOpen && b.probe != nil {
		return b.probeAt.Add(b.cfg.OpenFor)
	}
	return b.openUntil
}

// record reports an outcome: nil, errCounted or errExcluded. While a probe
// is out, only the probe's own target can report, and its report is the
// probe's result; outcomes that arrive while open are dropped.
func (b *breaker) record(owner string, outcome error, now time.Time) {
	if b.failing != nil && outcome == errCounted {
		b.failing[owner] = now
	}
	if b.probe != nil {
		if b.probeOwner == owner {
			b.probe(outcome)
			b.probe = nil
		}
		return
	}
	if b.cb.State() != gobreaker.StateClosed {
		return
	}
	if done, err := b.cb.Allow(); err == nil {
		done(outcome)
	}
}

// release hands back owner's probe unused.
func (b *breaker) release(owner string) {
	if b.probe != nil && b.probeOwner == owner {
		b.probe(errExcluded)
		b.probe = nil
	}
}

// locked runs f under b.mu and returns the state changes it caused.
func (b *breaker) locked(f func()) []BreakerEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
	ev := b.events
	b.events = nil
	return ev
}
