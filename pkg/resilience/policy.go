package resilience

import (
	"fmt"
	"time"
)

// MaxRetries is the most same-target retries any profile allows.
const MaxRetries = 10

// Jitter selects how a backoff delay is randomised.
type Jitter uint8

const (
	// JitterProportional draws from (¾·d, d]: retries spread out but never
	// come much earlier than the backoff.
	JitterProportional Jitter = iota
	// JitterFull draws from (0, d].
	JitterFull
)

// Profile holds the retry numbers of one kind of caller.
type Profile struct {
	Name string
	// Base is the first backoff; each retry doubles it, up to Cap.
	Base, Cap time.Duration
	Jitter    Jitter
	// MaxHintWait is the longest upstream hint honoured by waiting. A
	// longer hint is never shortened: the target is skipped instead.
	MaxHintWait time.Duration
	// MaxRetries is the number of same-target retries (0 … MaxRetries).
	MaxRetries int
	// PreferFailover moves to a healthy alternative instead of waiting.
	PreferFailover bool
}

// Standard is the profile for background work: base 1 s, doubling,
// proportional jitter, cap 10 s (a target's max_delay_s), hints honoured
// up to 120 s, 2 retries.
func Standard() Profile {
	return Profile{Name: "standard", Base: time.Second, Cap: 10 * time.Second,
		Jitter: JitterProportional, MaxHintWait: 120 * time.Second, MaxRetries: 2}
}

// Interactive is the profile for requests a user is waiting on: base
// 250 ms, doubling, full jitter, cap 8 s, hints honoured up to 8 s, 1
// retry, and failover preferred when a healthy hop exists.
func Interactive() Profile {
	return Profile{Name: "interactive", Base: 250 * time.Millisecond, Cap: 8 * time.Second,
		Jitter: JitterFull, MaxHintWait: 8 * time.Second, MaxRetries: 1, PreferFailover: true}
}

// validate reports the first field that is out of range.
func (p Profile) validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("profile %q: base %v must be positive", p.Name, p.Base)
	case p.Cap < p.Base:
		return fmt.Errorf("profile %q: cap %v is below base %v", p.Name, p.Cap, p.Base)
	case p.MaxHintWait < 0:
		return fmt.Errorf("profile %q: max hint wait %v is negative", p.Name, p.MaxHintWait)
	case p.MaxRetries < 0 || p.MaxRetries > MaxRetries:
		return fmt.Errorf("profile %q: max retries %d outside 0…%d", p.Name, p.MaxRetries, MaxRetries)
	case p.Jitter > JitterFull:
		return fmt.Errorf("profile %q: unknown jitter %d", p.Name, p.Jitter)
	}
	return nil
}

// Policy turns a profile into delays and decisions. It is a pure
// function of its arguments and its random source; it holds no state and
// is safe for concurrent use when the source is.
type Policy struct {
	profile Profile
	rand    func() float64
}

// NewPolicy returns a policy for p, or an error naming the first field
// of p that is out of range. rand returns values in [0, 1) and drives the
// jitter; a nil rand disables jitter (delays are then the upper bound of
// the backoff and the exact hint), which suits tests.
func NewPolicy(p Profile, rand func() float64) (*Policy, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("retry policy: %w", err)
	}
	return &Policy{profile: p, rand: rand}, nil
}

// Profile returns the policy's profile.
func (p *Policy) Profile() Profile { return p.profile }

// random returns a value in [0, 1); 0 without a source.
func (p *Policy) random() float64 {
	if p.rand == nil {
		return 0
	}
	r := p.rand()
	if !(r >= 0) || r >= 1 { // also catches NaN
		return 0
	}
	return r
}

// Backoff is the jittered delay before retry number retries+1 when the
// upstream gave no hint: min(Base·2^retries, Cap), then jitter.
func (p *Policy) Backoff(retries int) time.Duration {
	d := p.profile.Base
	for i := 0; i < retries && d < p.profile.Cap; i++ {
		if d > p.profile.Cap/2 {
			d = p.profile.Cap
			break
		}
		d *= 2
	}
	d = min(d, p.profile.Cap)
	spread := 0.25
	if p.profile.Jitter == JitterFull {
		spread = 1
	}
	return max(time.Duration(float64(d)*(1-spread*p.random())), 1)
}

// delay is the wait before the next same-target attempt, given the retries
// already made and the upstream's hint. A positive hint replaces the
// backoff, with up to 10 % upward jitter; a zero hint means the backoff.
// ok is false when the policy stops: the retry budget is spent, or the
// hint is longer than MaxHintWait (a long hint is never shortened).
func (p *Policy) delay(retries int, hint time.Duration, hasHint bool) (d time.Duration, ok bool) {
	if retries >= p.profile.MaxRetries {
		return 0, false
	}
	if hasHint && hint > p.profile.MaxHintWait {
		return 0, false
	}
	if hasHint && hint > 0 {
		return hint + time.Duration(float64(hint)*0.1*p.random()), true
	}
	return p.Backoff(retries), true
}
