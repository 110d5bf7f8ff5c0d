package limiter

import "time"

// Clock tells the time. The Limiter reads it once per decision.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
