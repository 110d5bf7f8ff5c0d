package routing_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

const targets = `
targets:
  primary:
    fallback_models: [secondary, tertiary]
    model: acme-large
    provider: acme
    cluster: acme
    max_concurrent: 1
    rate_limits: {requests_per_minute: 2, algorithm: fixed_window}
    retry_config: {profile: standard, num_retries: 3}
  secondary:
    fallback_models: [deep]
    model: acme-small
    provider: acme
    cluster: acme
    token_limits: {tokens_per_minute: 100}
    retry_config: {profile: interactive, num_retries: 1}
  deep:
    cluster: other
  tertiary:
    cluster: gamma
    model: gamma-small
  bare:
    cluster: bare
`

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type rig struct {
	t    *testing.T
	snap *policy.Snapshot
	clk  *limitertest.Clock
	lim  *limiter.Limiter
	reg  *resilience.Registry
	r    *routing.Router
}

func newRig(t *testing.T) *rig {
	t.Helper()
	return newRigWith(t, targets)
}

// newRigWith is newRig over the targets of policyText.
func newRigWith(t *testing.T, policyText string) *rig {
	t.Helper()
	snap := policy.Compile(policy.File{Name: "targets.yaml", Data: []byte(policyText)})
	if policy.HasErrors(snap.Problems()) {
		t.Fatalf("policy: %v", snap.Problems())
	}
	g := &rig{t: t, snap: snap, clk: limitertest.NewClock(t0), reg: resilience.NewRegistry()}
	g.lim = limiter.New(limiter.WithClock(g.clk))
	g.r = routing.New(routing.Deps{Limits: g.lim, Slots: g.lim, Breakers: g.reg, Now: g.clk.Now})
	return g
}

func (g *rig) target(name string) *policy.Target {
	g.t.Helper()
	t := g.snap.Target(name)
	if t == nil {
		g.t.Fatalf("no target %s", name)
	}
	return t
}

func (g *rig) choose(root string, keep routing.Scope) routing.Choice {
	g.t.Helper()
	c, err := g.r.Choose(context.Background(), g.snap, g.target(root), keep)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(c.Release)
	return c
}

func (g *rig) openBreaker(name string) {
	for range 5 {
		g.reg.Record(routing.BreakerTarget(g.target(name)), resilience.Verdict{Class: resilience.ClassServer, CountTarget: true})
	}
}

// spend takes primary's two requests of the minute.
func (g *rig) spendPrimary() {
	for range 2 {
		c := g.choose("primary", routing.Scope{})
		if c.Hop == nil || c.Hop.Name != "primary" {
			g.t.Fatalf("primary not served: %+v", c.Walk.Hops)
		}
		c.Release()
	}
}

// hop is one hop of a walk as the tests expect it.
type hop struct {
	name   string
	status resilience.HopStatus
	reason resilience.SkipReason
}

func wantHops(t *testing.T, c routing.Choice, want ...hop) {
	t.Helper()
	if len(c.Walk.Hops) != len(want) {
		t.Fatalf("hops %+v, want %+v", c.Walk.Hops, want)
	}
	for i, w := range want {
		h := c.Walk.Hops[i]
		if h.Target != w.name || h.Status != w.status || h.Reason != w.reason {
			t.Errorf("hop %d: %s %v %q, want %s %v %q", i, h.Target, h.Status, h.Reason, w.name, w.status, w.reason)
		}
	}
}

var (
	served = resilience.HopServed
	skip   = resilience.HopSkipped
)

func TestChooseServesRequestedTarget(t *testing.T) {
	g := newRig(t)
	c := g.choose("primary", routing.Scope{})
	wantHops(t, c, hop{"primary", served, ""})
	if c.Hop.Name != "primary" || c.Rate.Limit != 2 || c.Rate.Remaining != 1 {
		t.Errorf("hop %v rate %+v, want primary with 1 of 2 left", c.Hop, c.Rate)
	}
	if n := g.lim.InUse(routing.SlotKey("primary")); n != 1 {
		t.Errorf("slots in use %d, want 1", n)
	}
	c.Release()
	if n := g.lim.InUse(routing.SlotKey("primary")); n != 0 {
		t.Errorf("slots in use %d after release, want 0", n)
	}
}

func TestChooseWalkReasons(t *testing.T) {
	cases := []struct {
		name  string
		setup func(g *rig)
		scope routing.Scope
		want  []hop
	}{
		{"breaker open", func(g *rig) { g.openBreaker("primary") }, routing.Scope{},
			[]hop{{"primary", skip, resilience.SkipBreakerOpen}, {"secondary", served, ""}}},
		{"rate limited", (*rig).spendPrimary, routing.Scope{},
			[]hop{{"primary", skip, resilience.SkipRateLimited}, {"secondary", served, ""}}},
		{"concurrency full", func(g *rig) { g.choose("primary", routing.Scope{}) }, routing.Scope{},
			[]hop{{"primary", skip, resilience.SkipConcurrencyLimited}, {"secondary", served, ""}}},
		{"token budget spent", func(g *rig) {
			g.openBreaker("primary")
			if err := g.r.ChargeTokens(g.target("secondary"), 150); err != nil {
				g.t.Fatal(err)
			}
		}, routing.Scope{}, []hop{{"primary", skip, resilience.SkipBreakerOpen}, {"secondary", skip, routing.SkipTokenLimited},
			{"deep", served, ""}}},
		{"other cluster", nil, routing.Scope{Cluster: "gamma"},
			[]hop{{"primary", skip, resilience.SkipIneligible}, {"secondary", skip, resilience.SkipIneligible},
				{"deep", skip, resilience.SkipIneligible}, {"tertiary", served, ""}}},
		{"hint skip", func(g *rig) {
			g.reg.Record(routing.BreakerTarget(g.target("primary")), resilience.Verdict{Class: resilience.ClassRate, SkipFor: time.Hour})
		}, routing.Scope{}, []hop{{"primary", skip, resilience.SkipRateLimited}, {"secondary", served, ""}}},
		{"held hop asks its breakers only", (*rig).spendPrimary, routing.Scope{Held: "primary"},
			[]hop{{"primary", served, ""}}},
		{"held hop with its breaker open", func(g *rig) { g.openBreaker("primary") }, routing.Scope{Held: "primary"},
			[]hop{{"primary", skip, resilience.SkipBreakerOpen}, {"secondary", served, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t)
			if c.setup != nil {
				c.setup(g)
			}
			wantHops(t, g.choose("primary", c.scope), c.want...)
		})
	}
}

// TestRefusedHopConsumesNothing: a hop refused by its rate limit gives
// back its slot, and one refused by its breaker takes no rate.
func TestRefusedHopConsumesNothing(t *testing.T) {
	g := newRig(t)
	g.spendPrimary()
	c := g.choose("primary", routing.Scope{})
	if c.Hop.Name != "secondary" {
		t.Fatalf("hop %s, want secondary", c.Hop.Name)
	}
	if n := g.lim.InUse(routing.SlotKey("primary")); n != 0 {
		t.Errorf("a rate-limited primary holds %d slots", n)
	}
	g.clk.Advance(time.Minute)
	g.openBreaker("primary")
	g.choose("primary", routing.Scope{})
	g.reg = resilience.NewRegistry() // breakers closed again
	g.r = routing.New(routing.Deps{Limits: g.lim, Slots: g.lim, Breakers: g.reg, Now: g.clk.Now})
	c = g.choose("primary", routing.Scope{})
	if c.Hop.Name != "primary" || c.Rate.Remaining != 1 {
		t.Errorf("hop %s rate %+v: the skipped walk spent primary's rate", c.Hop.Name, c.Rate)
	}
}

func TestRefusal(t *testing.T) {
	cases := []struct {
		name               string
		setup              func(g *rig)
		status             int
		typ, code, outcome string
		wait               time.Duration
		hasDenied          bool
	}{
		{"every breaker open", func(g *rig) {
			for _, n := range []string{"primary", "secondary", "deep", "tertiary"} {
				g.openBreaker(n)
			}
		}, 503, "server_error", "service_unavailable", "unavailable", 30 * time.Second, false},
		{"rate and breakers", func(g *rig) {
			g.spendPrimary()
			g.clk.Advance(20 * time.Second)
			for _, n := range []string{"secondary", "deep", "tertiary"} {
				g.openBreaker(n)
			}
		}, 429, "requests", "rate_limit_exceeded", "rate_limited", 30 * time.Second, true},
		{"tokens first", func(g *rig) {
			g.openBreaker("primary")
			g.r.ChargeTokens(g.target("secondary"), 500)
			for _, n := range []string{"deep", "tertiary"} {
				g.openBreaker(n)
			}
		}, 429, "tokens", "rate_limit_exceeded", "rate_limited", 30 * time.Second, true},
		{"concurrency", func(g *rig) {
			g.choose("primary", routing.Scope{})
			for _, n := range []string{"secondary", "deep", "tertiary"} {
				g.openBreaker(n)
			}
		}, 429, "requests", "concurrency_limit_exceeded", "concurrency_limited", resilience.ConcurrencyWait, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t)
			c.setup(g)
			ch := g.choose("primary", routing.Scope{})
			if ch.Hop != nil {
				t.Fatalf("served by %s", ch.Hop.Name)
			}
			r := ch.Refusal(g.target("primary"))
			if r.Status != c.status || r.Type != c.typ || r.Code != c.code || r.Outcome != c.outcome || r.Message == "" {
				t.Errorf("refusal %+v, want %d %s %s %s", r, c.status, c.typ, c.code, c.outcome)
			}
			// Breaker waits run on the real clock: allow for the test's own time.
			if r.Wait > c.wait || r.Wait < c.wait-5*time.Second {
				t.Errorf("wait %v, want about %v", r.Wait, c.wait)
			}
			if ch.HasDenied != c.hasDenied {
				t.Errorf("has denied %v, want %v", ch.HasDenied, c.hasDenied)
			}
		})
	}
}

func TestRequested(t *testing.T) {
	g := newRig(t)
	cases := []struct{ header, model, want string }{
		{"secondary", "acme-large", "secondary"},
		{"", "tertiary", "tertiary"},
		{"", "acme-small", "secondary"},
		{"nobody", "acme-large", ""},
		{"", "nobody", ""},
		{"", "", ""},
	}
	for _, c := range cases {
		got := routing.Requested(g.snap, c.header, c.model)
		if (got == nil && c.want != "") || (got != nil && got.Name != c.want) {
			t.Errorf("Requested(%q, %q) = %v, want %q", c.header, c.model, got, c.want)
		}
	}
}

func TestNilDepsServeEverything(t *testing.T) {
	g := newRig(t)
	r := routing.New(routing.Deps{})
	for range 5 {
		c, err := r.Choose(context.Background(), g.snap, g.target("primary"), routing.Scope{})
		if err != nil || c.Hop == nil || c.Hop.Name != "primary" {
			t.Fatalf("choice %+v, %v", c.Walk.Hops, err)
		}
	}
	if r.ChargesTokens(g.target("secondary")) {
		t.Error("a router without limits charges tokens")
	}
}

func TestChooseCanceled(t *testing.T) {
	g := newRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.r.Choose(ctx, g.snap, g.target("primary"), routing.Scope{}); err == nil {
		t.Fatal("a canceled walk returned no error")
	}
}
