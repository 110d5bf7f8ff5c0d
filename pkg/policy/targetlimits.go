package policy

import (
	"strconv"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

func quote(s string) string { return strconv.Quote(s) }

// decodeRateLimits reads a target's rate_limits into a rule; nil when the
// block is dropped, disabled or has no window.
func (d *decoder) decodeRateLimits(f field) *limiter.Rule {
	fs, ok := d.fields(f.node, f.path, "rate_limits dropped")
	if !ok {
		return nil
	}
	var s RateLimitsSpec
	b := newBlock(d, "rate_limits dropped")
	b.decode(fs, &s, nil)
	if b.bad {
		return nil
	}
	return d.compileRateLimits(b, f, &s)
}

func (d *decoder) compileRateLimits(b *block, f field, s *RateLimitsSpec) *limiter.Rule {
	alg, err := limiter.ParseAlgorithm(s.Algorithm)
	if err != nil {
		b.failf(f.node, join(f.path, "algorithm"), "%v", err)
	}
	mode, err := parseFailMode(s.OnStoreUnavailable)
	if err != nil {
		b.failf(f.node, join(f.path, "on_store_unavailable"), "%v", err)
	}
	if b.bad || (s.Enabled != nil && !*s.Enabled) {
		return nil
	}
	r := &limiter.Rule{Algorithm: alg, Tuning: limiter.Tuning{
		LocalAllowance:     s.LocalAllowance,
		SyncInterval:       ms(s.SyncIntervalMs),
		StoreTimeout:       ms(s.RedisTimeoutMs),
		CacheTTL:           ms(s.CacheTTLMs),
		OnStoreUnavailable: mode,
	}}
	r.Windows = windows(s.RequestsPerSecond, time.Second, s.RequestsPerMinute, time.Minute, s.RequestsPerHour, time.Hour)
	if len(r.Windows) == 0 {
		if s.BurstSize > 0 {
			d.warnf(f.node, join(f.path, "burst_size"), "burst_size without a rate; ignored")
		}
		return nil
	}
	if s.BurstSize > 0 {
		if alg != limiter.TokenBucket {
			d.warnf(f.node, join(f.path, "burst_size"), "burst_size applies to token_bucket only; ignored")
		} else {
			r.Windows[0].Burst = uint64(s.BurstSize) // the shortest window
		}
	}
	return d.validRule(f, r, "rate_limits dropped")
}

// decodeTokenLimits reads a target's token_limits into a rule that always
// charges (tokens reported by a response were spent).
func (d *decoder) decodeTokenLimits(f field) *limiter.Rule {
	fs, ok := d.fields(f.node, f.path, "token_limits dropped")
	if !ok {
		return nil
	}
	var s TokenLimitsSpec
	b := newBlock(d, "token_limits dropped")
	b.decode(fs, &s, nil)
	alg, err := limiter.ParseAlgorithm(s.Algorithm)
	if err != nil {
		b.failf(f.node, join(f.path, "algorithm"), "%v", err)
	}
	if b.bad {
		return nil
	}
	r := &limiter.Rule{Algorithm: alg, AlwaysCharge: true}
	r.Windows = windows(s.TokensPerMinute, time.Minute, s.TokensPerHour, time.Hour, s.TokensPerDay, 24*time.Hour)
	if len(r.Windows) == 0 {
		return nil
	}
	return d.validRule(f, r, "token_limits dropped")
}

func (d *decoder) validRule(f field, r *limiter.Rule, outcome string) *limiter.Rule {
	if err := r.Validate(); err != nil {
		d.errorf(f.node, f.path, "%v (%s)", err, outcome)
		return nil
	}
	return r
}

// windows returns a window per non-zero limit, shortest period first.
func windows(l1 uint32, p1 time.Duration, l2 uint32, p2 time.Duration, l3 uint32, p3 time.Duration) []limiter.Window {
	var out []limiter.Window
	for _, w := range []limiter.Window{{Limit: uint64(l1), Period: p1}, {Limit: uint64(l2), Period: p2}, {Limit: uint64(l3), Period: p3}} {
		if w.Limit > 0 {
			out = append(out, w)
		}
	}
	return out
}

func ms(v uint32) time.Duration { return time.Duration(v) * time.Millisecond }
