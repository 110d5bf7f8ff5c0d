package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// Unit is the time unit of a rate limit. The numbering is the RLS proto's
// (envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit), so a
// value converts to and from the wire with a plain cast.
type Unit int32

// Units, numbered as in the RLS proto.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[Unit]string{
	Second: "second", Minute: "minute", Hour: "hour", Day: "day",
	Week: "week", Month: "month", Year: "year",
}

// String returns the lower-case policy-file name of u.
func (u Unit) String() string {
	if n, ok := unitNames[u]; ok {
		return n
	}
	return fmt.Sprintf("unit(%d)", int32(u))
}

// MarshalText renders u as its name.
func (u Unit) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// ParseUnit maps a unit name, in any case ("minute", "MINUTE"), to a Unit.
func ParseUnit(s string) (Unit, error) {
	l := strings.ToLower(s)
	for u, n := range unitNames {
		if n == l {
			return u, nil
		}
	}
	return UnitUnknown, fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", s)
}

// UnitPeriod is the length of one u. As in envoyproxy/ratelimit, a month
// is 30 days and a year 365 days. It is zero for an unknown unit.
func UnitPeriod(u Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// maxMultiplier keeps a window's period (multiplier × a year at most)
// far inside time.Duration.
const maxMultiplier = 100

func windowPeriod(u Unit, multiplier uint32) (time.Duration, error) {
	p := UnitPeriod(u)
	if p == 0 {
		return 0, fmt.Errorf("unknown unit %d", int32(u))
	}
	if multiplier == 0 {
		multiplier = 1
	}
	if multiplier > maxMultiplier {
		return 0, fmt.Errorf("unit_multiplier %d above %d", multiplier, maxMultiplier)
	}
	return p * time.Duration(multiplier), nil
}

// RuleFromOverride builds the rule for an RLS descriptor limit override:
// rpu units per multiplier × u (a zero multiplier means 1). When base is
// the limit the descriptor matched (nil when none), the override keeps its
// algorithm, always_charge and tuning, and drops its burst (the bucket
// size then defaults to the overriding rate). A zero rpu denies every
// request, with a fixed window whatever the base algorithm.
func RuleFromOverride(rpu uint32, u Unit, multiplier uint32, base *Limit) (*limiter.Rule, error) {
	period, err := windowPeriod(u, multiplier)
	if err != nil {
		return nil, err
	}
	r := &limiter.Rule{Windows: []limiter.Window{{Limit: uint64(rpu), Period: period}}}
	if base != nil && base.Rule != nil {
		r.Algorithm = base.Rule.Algorithm
		r.AlwaysCharge = base.Rule.AlwaysCharge
		r.Tuning = base.Rule.Tuning
	}
	if rpu == 0 {
		// Zero denies everything; a bucket cannot express that, a window can.
		r.Algorithm = limiter.FixedWindow
	}
	if err := r.Validate(); err != nil {
		return nil, errors.New("limit override: " + err.Error())
	}
	return r, nil
}
