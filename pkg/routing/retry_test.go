package routing_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// verdict classifies a response as the upstream role does.
func (g *rig) verdict(status int, kv ...string) resilience.Verdict {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return resilience.Classify(resilience.Input{Status: status, Header: h, Now: g.clk.Now()})
}

func TestNext(t *testing.T) {
	acme := routing.Scope{Cluster: "acme"}
	cases := []struct {
		name        string
		setup       func(g *rig)
		target      string
		status      int
		kv          []string
		retries     int
		scope       routing.Scope
		action      resilience.Action
		retry       bool
		alternative string
		skipAtLeast time.Duration
	}{
		{"standard retries within num_retries", nil, "primary", 503, nil, 2, acme,
			resilience.ActionRetry, true, "", 0},
		{"standard past num_retries moves on", nil, "primary", 503, nil, 3, acme,
			resilience.ActionFailover, true, "secondary", 8 * time.Second},
		{"standard waits for a hint up to 120 s", nil, "primary", 429, []string{"retry-after", "100"}, 0, acme,
			resilience.ActionRetry, true, "", 100 * time.Second},
		{"standard does not wait 121 s", nil, "primary", 429, []string{"retry-after", "121"}, 0, acme,
			resilience.ActionFailover, true, "secondary", 121 * time.Second},
		{"longer hint, no alternative in the cluster", nil, "primary", 429, []string{"retry-after", "121"}, 0,
			routing.Scope{Cluster: "solo"}, resilience.ActionFailover, false, "", 121 * time.Second},
		{"interactive prefers an eligible fallback", nil, "secondary", 503, nil, 0, acme,
			resilience.ActionFailover, true, "primary", 250 * time.Millisecond},
		{"interactive retries without one", func(g *rig) { g.openBreaker("primary") }, "secondary", 503, nil, 0, acme,
			resilience.ActionRetry, true, "", 0},
		{"interactive does not wait 9 s", func(g *rig) { g.openBreaker("primary") }, "secondary", 429,
			[]string{"retry-after", "9"}, 0, acme, resilience.ActionFailover, false, "", 9 * time.Second},
		{"interactive's fallback is busy", func(g *rig) { g.choose("primary", routing.Scope{}) }, "secondary", 503, nil, 0, acme,
			resilience.ActionRetry, true, "", 0},
		{"interactive's fallback is rate limited", (*rig).spendPrimary, "secondary", 503, nil, 0, acme,
			resilience.ActionRetry, true, "", 0},
		{"caller error", nil, "primary", 400, nil, 0, acme, resilience.ActionFail, false, "", 0},
		{"success", nil, "primary", 200, nil, 0, acme, resilience.ActionNone, false, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t)
			if c.setup != nil {
				c.setup(g)
			}
			n := g.r.Next(g.snap, g.target("primary"), g.target(c.target), g.verdict(c.status, c.kv...), c.retries, c.scope)
			alt := ""
			if n.Alternative != nil {
				alt = n.Alternative.Name
			}
			if n.Step.Action != c.action || n.Retry != c.retry || alt != c.alternative {
				t.Errorf("next %v retry %v alternative %q, want %v %v %q", n.Step.Action, n.Retry, alt, c.action, c.retry, c.alternative)
			}
			if n.SkipFor < c.skipAtLeast || (c.skipAtLeast == 0 && n.SkipFor != 0) {
				t.Errorf("skip %v, want at least %v", n.SkipFor, c.skipAtLeast)
			}
		})
	}
}

// TestAlternativeTakesNothing: looking for an alternative spends no rate,
// takes no slot and no breaker probe.
func TestAlternativeTakesNothing(t *testing.T) {
	g := newRig(t)
	for range 10 {
		alt, ok := g.r.Alternative(g.snap, g.target("primary"), "secondary", routing.Scope{})
		if !ok || alt.Name != "primary" {
			t.Fatalf("alternative %v %v, want primary", alt, ok)
		}
	}
	if n := g.lim.InUse(routing.SlotKey("primary")); n != 0 {
		t.Errorf("slots in use %d, want 0", n)
	}
	c := g.choose("primary", routing.Scope{})
	if c.Hop.Name != "primary" || c.Rate.Remaining != 1 {
		t.Errorf("hop %s, rate %+v: looking spent primary's rate", c.Hop.Name, c.Rate)
	}
	if _, ok := g.r.Alternative(g.snap, g.target("primary"), "primary", routing.Scope{Cluster: "nowhere"}); ok {
		t.Error("an alternative outside the scope")
	}
}

func TestRetryPolicy(t *testing.T) {
	g := newRig(t)
	cases := []struct {
		target      string
		profile     string
		retries     int
		maxHintWait time.Duration
	}{
		{"primary", "standard", 3, 120 * time.Second},
		{"secondary", "interactive", 1, 8 * time.Second},
		{"bare", "standard", 2, 120 * time.Second},
	}
	for _, c := range cases {
		p := routing.RetryPolicy(g.target(c.target)).Profile()
		if p.Name != c.profile || p.MaxRetries != c.retries || p.MaxHintWait != c.maxHintWait {
			t.Errorf("%s: profile %+v, want %s with %d retries, hints up to %v", c.target, p, c.profile, c.retries, c.maxHintWait)
		}
	}
}
