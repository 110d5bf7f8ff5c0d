package resilience

import (
	"strconv"
	"time"
)

// Action is what to do after an attempt.
type Action uint8

const (
	// ActionNone: the attempt succeeded.
	ActionNone Action = iota
	// ActionRetry: try the same target again after Step.Delay.
	ActionRetry
	// ActionFailover: try the next hop of the chain now.
	ActionFailover
	// ActionFail: return the upstream's error to the caller.
	ActionFail
	// ActionAbort: bytes already went downstream; end the stream with an
	// error.
	ActionAbort
)

var actionNames = [...]string{"none", "retry", "failover", "fail", "abort"}

// String returns the action's name.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// Attempt is the request's situation when an attempt has failed.
type Attempt struct {
	Retries        int       // same-target retries already made
	Now            time.Time // the current time
	Deadline       time.Time // the request's deadline; zero for none
	HasAlternative bool      // a healthy next hop exists
}

// Step is the decision after an attempt.
type Step struct {
	Action Action
	Delay  time.Duration // before the retry (ActionRetry)
	// SkipFor is how long other requests should skip this target: the
	// verdict's skip, raised to the hint (capped at MaxSkip) when the hint
	// is longer than the profile waits or than the deadline allows.
	SkipFor time.Duration
}

// Plan decides what follows a failed attempt with verdict v. It retries
// when the verdict allows, the budget and the deadline leave room for the
// wait, and (for a profile that prefers failover) no healthy alternative
// exists; otherwise it fails over when the verdict allows, and fails
// otherwise. It never sleeps less than a hint: a hint it cannot honour
// becomes a skip of the target.
func (p *Policy) Plan(v Verdict, a Attempt) Step {
	switch {
	case !v.Failed():
		return Step{}
	case v.Committed:
		return Step{Action: ActionAbort, SkipFor: v.SkipFor}
	case v.CallerError:
		return Step{Action: ActionFail, SkipFor: v.SkipFor}
	}
	skip := v.SkipFor
	longSkip := max(skip, min(v.Hint, MaxSkip))
	if v.HasHint && v.Hint > p.profile.MaxHintWait {
		skip = longSkip
	}
	preferOther := p.profile.PreferFailover && a.HasAlternative && v.Failover
	if v.Retry && !preferOther {
		if d, ok := p.delay(a.Retries, v.Hint, v.HasHint); ok {
			if a.Deadline.IsZero() || !a.Now.Add(d).After(a.Deadline) {
				return Step{Action: ActionRetry, Delay: d, SkipFor: skip}
			}
			if v.HasHint {
				skip = longSkip
			}
		}
	}
	if v.Failover {
		return Step{Action: ActionFailover, SkipFor: skip}
	}
	return Step{Action: ActionFail, SkipFor: skip}
}
