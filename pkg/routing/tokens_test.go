package routing_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

const tokenTargets = `
targets:
  big:
    cluster: acme
    context_window: 1000
    rate_limits: {requests_per_minute: 10, algorithm: fixed_window}
    token_limits: {tokens_per_minute: 1000}
    fallback_models: [small, huge]
  small:
    cluster: acme
    context_window: 200
  huge:
    cluster: other
    context_window: 100000
`

// tokensLeft reads what big's token budget has left, taking nothing.
func (g *rig) tokensLeft() uint64 {
	g.t.Helper()
	tg := g.target("big")
	out := make([]limiter.Result, 1)
	if _, err := g.lim.Decide([]limiter.Request{{Key: routing.TokenKey(tg), Rule: tg.TokenLimit, Op: limiter.Check}}, out); err != nil {
		g.t.Fatal(err)
	}
	return out[0].Remaining
}

// TestChooseReservesTokens: the serving hop reserves the estimate; a hop
// whose budget cannot take it is skipped as token_limit without spending
// its request rate; reconciling charges or refunds the difference.
func TestChooseReservesTokens(t *testing.T) {
	g := newRigWith(t, tokenTargets)
	c := g.choose("big", routing.Scope{Tokens: 600, Reserve: true})
	if c.Hop.Name != "big" || c.Reserved != 600 || g.tokensLeft() != 400 {
		t.Fatalf("hop %v reserved %d, %d left; want big, 600, 400", c.Hop, c.Reserved, g.tokensLeft())
	}
	c = g.choose("big", routing.Scope{Tokens: 100, Reserve: true, Cluster: "other"})
	wantHops(t, c, hop{"big", skip, resilience.SkipIneligible}, hop{"small", skip, resilience.SkipIneligible}, hop{"huge", served, ""})
	if c.Reserved != 0 {
		t.Errorf("a hop without a budget reserved %d", c.Reserved)
	}
	c = g.choose("big", routing.Scope{Tokens: 500, Reserve: true, Cluster: "other"})
	if c.Hop.Name != "huge" {
		t.Fatalf("hop %v, want huge", c.Hop)
	}
	c = g.choose("big", routing.Scope{Tokens: 500, Reserve: true})
	wantHops(t, c, hop{"big", skip, routing.SkipTokenLimited}, hop{"small", skip, routing.SkipContextWindow}, hop{"huge", served, ""})
	if c.Rate.Limit != 0 || !c.HasDenied {
		t.Errorf("rate %+v denied %v: want the token refusal recorded", c.Rate, c.HasDenied)
	}
	if err := g.r.Reconcile(g.target("big"), 600, 250); err != nil {
		t.Fatal(err)
	}
	if left := g.tokensLeft(); left != 750 {
		t.Errorf("after a refund %d left, want 750", left)
	}
	if err := g.r.Reconcile(g.target("big"), 100, 900); err != nil {
		t.Fatal(err)
	}
	if left := g.tokensLeft(); left != 0 {
		t.Errorf("after a charge past the budget %d left, want 0", left)
	}
	// Requests taken: the first reservation only; the refused walk gave its rate back.
	out := make([]limiter.Result, 1)
	tg := g.target("big")
	g.lim.Decide([]limiter.Request{{Key: routing.RateKey(tg), Rule: tg.RateLimit, Op: limiter.Check}}, out)
	if out[0].Remaining != 9 {
		t.Errorf("big's requests left %d, want 9", out[0].Remaining)
	}
}

// TestContextWindow: a hop smaller than the estimate is skipped; after a
// context-length error only a larger window is an alternative; a request
// too large for every hop is refused with 400.
func TestContextWindow(t *testing.T) {
	g := newRigWith(t, tokenTargets)
	c := g.choose("big", routing.Scope{Tokens: 300, Cluster: "acme"})
	wantHops(t, c, hop{"big", served, ""})
	if c.Reserved != 0 || g.tokensLeft() != 1000 {
		t.Errorf("a walk without Reserve reserved %d (%d left)", c.Reserved, g.tokensLeft())
	}
	c = g.choose("big", routing.Scope{Tokens: 5000})
	wantHops(t, c, hop{"big", skip, routing.SkipContextWindow}, hop{"small", skip, routing.SkipContextWindow}, hop{"huge", served, ""})
	v := resilience.Classify(resilience.Input{Status: 400, Body: []byte(`{"error":{"code":"context_length_exceeded","message":"too long"}}`)})
	if v.Class != resilience.ClassContextLength {
		t.Fatalf("class %v", v.Class)
	}
	n := g.r.Next(g.snap, g.target("big"), g.target("big"), v, 0, routing.Scope{})
	if n.Alternative == nil || n.Alternative.Name != "huge" {
		t.Errorf("alternative %v, want huge (small's window is smaller)", n.Alternative)
	}
	n = g.r.Next(g.snap, g.target("big"), g.target("big"), v, 0, routing.Scope{Cluster: "acme"})
	if n.Alternative != nil || n.Retry {
		t.Errorf("alternative %v retry %v in acme, want none", n.Alternative, n.Retry)
	}
	c, err := g.r.Choose(context.Background(), g.snap, g.target("big"), routing.Scope{Tokens: 1 << 20})
	if err != nil || c.Hop != nil {
		t.Fatalf("hop %v err %v, want none", c.Hop, err)
	}
	if r := c.Refusal(g.target("big")); r.Status != 400 || r.Code != "context_length_exceeded" || r.Outcome != "context_window" {
		t.Errorf("refusal %+v", r)
	}
}

// TestNextCluster: an interactive target plans its next attempt on its
// first eligible alternative's cluster; a standard one stays on its own
// cluster while it may retry, then moves.
func TestNextCluster(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(g *rig)
		target  string
		retries int
		want    string
	}{
		{"standard with retries left", nil, "primary", 0, "acme"},
		{"standard out of retries", nil, "primary", 3, "acme"}, // secondary, same cluster
		{"standard skipped after a hint", func(g *rig) {
			g.reg.Record(routing.BreakerTarget(g.target("primary")), resilience.Verdict{Class: resilience.ClassRate, SkipFor: time.Hour})
			g.openBreaker("secondary")
		}, "primary", 0, "other"},
		{"standard out of retries, secondary spent", func(g *rig) {
			g.openBreaker("secondary")
		}, "primary", 3, "other"},
		{"interactive", nil, "secondary", 0, "acme"}, // primary is the first alternative
		{"interactive, primary open", func(g *rig) { g.openBreaker("primary") }, "secondary", 0, "other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t)
			if c.setup != nil {
				c.setup(g)
			}
			if got := g.r.NextCluster(g.snap, g.target("primary"), g.target(c.target), c.retries); got != c.want {
				t.Errorf("next cluster %s, want %s", got, c.want)
			}
		})
	}
}
