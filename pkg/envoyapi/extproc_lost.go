package envoyapi

import (
	"sync"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// Bounds of the attempts remembered as lost.
const (
	maxLost = 4096
	lostTTL = time.Minute
)

// lostAttempts remembers, by x-request-id, the target of an upstream
// attempt whose ext_proc stream ended without a response: a connection
// that failed or was reset, or a per-try timeout, but also a client that
// went away, which Envoy reports the same way. Only a retry of the same
// request tells them apart: the router retried, so the attempt failed.
// The retry's upstream role takes the entry and feeds the breakers. It is
// safe for concurrent use; entries older than lostTTL are dropped when
// the map is full, and a full map of fresh entries forgets the new one.
type lostAttempts struct {
	mu sync.Mutex
	m  map[string]lostAttempt
}

type lostAttempt struct {
	target string
	at     time.Time
}

// put remembers the target of request id's lost attempt.
func (l *lostAttempts) put(id, target string, now time.Time) {
	if id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]lostAttempt)
	}
	if len(l.m) >= maxLost {
		for k, v := range l.m {
			if now.Sub(v.at) > lostTTL {
				delete(l.m, k)
			}
		}
		if len(l.m) >= maxLost {
			return
		}
	}
	l.m[id] = lostAttempt{target: target, at: now}
}

// take returns and forgets the target of request id's lost attempt.
func (l *lostAttempts) take(id string) (string, bool) {
	if id == "" {
		return "", false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.m[id]
	delete(l.m, id)
	return a.target, ok
}

// lost notes an attempt that ended without a response.
func (u *upstream) lost() {
	if u.target != nil && u.status == 0 && u.routed {
		u.x.lost.put(u.requestID, u.target.Name, u.x.route.Now())
	}
}

// retried feeds the breakers with the transport failure of the request's
// previous attempt, when it ended without a response and the router
// retried it.
func (u *upstream) retried() {
	if u.attempt < 2 {
		return
	}
	name, ok := u.x.lost.take(u.requestID)
	t := u.snap.Target(name)
	if !ok || t == nil {
		return
	}
	v := resilience.Classify(resilience.Input{Transport: resilience.TransportReset, Now: u.x.route.Now()})
	u.x.route.Record(t, v)
	u.x.metrics.upstreamVerdict(u.ctx, "failure", string(v.Class))
}
