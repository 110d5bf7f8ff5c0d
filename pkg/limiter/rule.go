package limiter

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Algorithm selects how a Window counts.
type Algorithm uint8

const (
	// FixedWindow counts hits per epoch-aligned window. It is the zero
	// value, the behaviour of envoyproxy/ratelimit.
	FixedWindow Algorithm = iota
	// SlidingWindow weights the previous window's count by the part of it
	// still inside the sliding window, and adds the current count.
	SlidingWindow
	// TokenBucket is GCRA: a theoretical arrival time per key, emission
	// interval Period/Limit, capacity Burst.
	TokenBucket
)

var algorithmNames = [...]string{"fixed_window", "sliding_window", "token_bucket"}

// String returns the policy-file name of a.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm maps a policy-file name to an Algorithm. The empty string
// is FixedWindow.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return FixedWindow, nil
	}
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want fixed_window, sliding_window or token_bucket)", s)
}

// Window is one limit: Limit units per Period. Windows are aligned to the
// Unix epoch. For TokenBucket, Limit/Period is the refill rate and Burst the
// bucket size (zero means Limit).
type Window struct {
	Limit  uint64
	Period time.Duration
	Burst  uint64
}

// Capacity is the most units the window can hold at once: Burst for a token
// bucket that sets one, else Limit.
func (w Window) Capacity(a Algorithm) uint64 {
	if a == TokenBucket && w.Burst > 0 {
		return w.Burst
	}
	return w.Limit
}

// FailMode says what a replica does when the store cannot be reached.
type FailMode uint8

const (
	// FailStatic enforces ceil(L/N) of every window per replica (default).
	FailStatic FailMode = iota
	// FailOpen admits everything and pays it back after recovery.
	FailOpen
)

// Tuning holds the credit engine's knobs. Every zero value means the
// documented default, so the zero Tuning is the right one for most rules.
type Tuning struct {
	// LocalAllowance is the share of the free budget a replica may hold as
	// credit (split among the replicas); zero means the whole free budget.
	// 1 or more makes the rule local-only: each replica enforces the full
	// limit with no store, as every rule does when no store is configured.
	LocalAllowance float64
	// SyncInterval is how often a busy key syncs; zero means 100 ms.
	SyncInterval time.Duration
	// StoreTimeout bounds how long a request waits on the store; while
	// the store answers, a request waits on up to 180 ms more for its
	// round if the store is usually fast (else for two of its usual
	// round trips if that ends within 120 ms more), and for units other
	// replicas are releasing. Zero means 10 ms.
	StoreTimeout time.Duration
	// CacheTTL is how long the store may stay unreachable before the rule
	// degrades to OnStoreUnavailable; zero means 1 s.
	CacheTTL time.Duration
	// OnStoreUnavailable selects fail-static (zero) or fail-open.
	OnStoreUnavailable FailMode
}

func (t Tuning) localOnly() bool { return t.LocalAllowance >= 1 }

func (t Tuning) share() float64 {
	if !(t.LocalAllowance > 0 && t.LocalAllowance <= 1) {
		return 1
	}
	return t.LocalAllowance
}

// shareFraction is the part of a window's limit the static shares of
// one of its epochs hold between them (ShareFraction).
func (r *Rule) shareFraction() float64 { return ShareFraction(r.Algorithm, r.Tuning.share()) }

func (t Tuning) syncInterval() time.Duration { return orDefault(t.SyncInterval, 100*time.Millisecond) }
func (t Tuning) storeTimeout() time.Duration { return orDefault(t.StoreTimeout, 10*time.Millisecond) }
func (t Tuning) cacheTTL() time.Duration     { return orDefault(t.CacheTTL, time.Second) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Rule is the set of limits that apply to a key. Every window must admit a
// request for it to be admitted. A Rule is a value: callers build it once
// (the policy compiler does) and share it read-only.
type Rule struct {
	// Name is reported with decisions (the policy's rate_limit name).
	Name string
	// Algorithm applies to every window.
	Algorithm Algorithm
	// Windows must hold at least one window.
	Windows []Window
	// AlwaysCharge records hits even when they are denied (the excess is
	// debt that later requests pay back).
	AlwaysCharge bool
	// Tuning for the credit engine.
	Tuning Tuning
}

// Validate reports the first problem that makes r unusable.
func (r *Rule) Validate() error {
	if int(r.Algorithm) >= len(algorithmNames) {
		return fmt.Errorf("unknown algorithm %d", r.Algorithm)
	}
	if len(r.Windows) == 0 {
		return errors.New("no window")
	}
	for i, w := range r.Windows {
		switch {
		case w.Limit == 0 && r.Algorithm == TokenBucket:
			return fmt.Errorf("window %d: token bucket rate must be positive", i)
		case w.Period < time.Microsecond || w.Period%time.Microsecond != 0:
			return fmt.Errorf("window %d: period must be a positive whole number of microseconds", i)
		case w.Limit > maxLimit || w.Burst > maxLimit:
			return fmt.Errorf("window %d: limit above %d", i, maxLimit)
		case r.Algorithm == TokenBucket && w.Period/time.Duration(w.Limit) == 0:
			return fmt.Errorf("window %d: rate above one unit per nanosecond", i)
		case r.Algorithm == TokenBucket && !toleranceFits(w):
			return fmt.Errorf("window %d: burst times refill interval above %v", i, time.Duration(maxTolerance))
		}
	}
	if t := r.Tuning; !(t.LocalAllowance >= 0) || t.SyncInterval < 0 || t.StoreTimeout < 0 || t.CacheTTL < 0 {
		return errors.New("tuning: negative value")
	}
	return nil
}

// maxLimit keeps window maths inside int64 nanosecond products.
const maxLimit = 1 << 40

// maxTolerance bounds a token bucket's capacity in time (about 146 years),
// so arrival times stay far from int64 overflow.
const maxTolerance = 1 << 62

func toleranceFits(w Window) bool {
	hi, lo := bits.Mul64(w.Capacity(TokenBucket), uint64(interval(w)))
	return hi == 0 && lo <= maxTolerance
}

// Fingerprint identifies the limits of r (algorithm and windows), not its
// name or tuning. Keys carry it, so a changed limit starts fresh while an
// identical one keeps its state across reloads.
func (r *Rule) Fingerprint() string {
	var b strings.Builder
	b.WriteString(r.Algorithm.String())
	for _, w := range r.Windows {
		b.WriteByte(';')
		b.WriteString(strconv.FormatUint(w.Limit, 10))
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(int64(w.Period), 10))
		if r.Algorithm == TokenBucket && w.Burst > 0 {
			b.WriteByte('b')
			b.WriteString(strconv.FormatUint(w.Burst, 10))
		}
	}
	if r.AlwaysCharge {
		b.WriteString(";ac")
	}
	return b.String()
}
