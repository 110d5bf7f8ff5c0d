package policy

import (
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// TestExampleConfig loads the shipped example policies: they must compile
// with no error and do what their comments say.
func TestExampleConfig(t *testing.T) {
	s, err := Load("../../config")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Problems() {
		t.Errorf("%s %s", p.Severity, p)
	}
	limit := func(domain string, kv ...string) *Limit { return s.Match(domain, e(kv...)) }
	if l := limit("api", "generic_key", "api", "api_key", "k1"); l == nil || l.Name != "key_per_minute" || l.RequestsPerUnit != 60 {
		t.Errorf("per-key limit = %+v", l)
	}
	if l := limit("api", "generic_key", "api", "api_key", "premium-7"); l == nil || l.RequestsPerUnit != 600 {
		t.Errorf("premium limit = %+v", l)
	}
	if l := limit("api", "generic_key", "api", "api_key", "suspicious-key-1234"); l == nil || !l.ShadowMode {
		t.Errorf("shadow limit = %+v", l)
	}
	if l := limit("api", "remote_address", "203.0.113.9"); l == nil || l.Unit != Second || l.Rule.Tuning.LocalAllowance != 0.8 {
		t.Errorf("per-IP limit = %+v", l)
	}
	if l := limit("api", "remote_address", "10.20.1.1"); l == nil || !l.Unlimited {
		t.Errorf("office limit = %+v", l)
	}
	if n := s.Domain("api").Child("remote_address", "192.168.100.7"); !n.ShareThreshold() || n.CounterValue("192.168.100.7") != "192.168.100.*" {
		t.Errorf("shared node = %+v", n)
	}
	if l := limit("llm", "model", "gpt-4o"); l == nil || l.Rule.Algorithm != limiter.TokenBucket || l.Rule.Windows[0].Burst != 20 {
		t.Errorf("model limit = %+v", l)
	}
	if l := limit("llm", "model", "gpt-4o", "tokens", "used"); l == nil || !l.Rule.AlwaysCharge {
		t.Errorf("token limit = %+v", l)
	}
	checkExampleTargets(t, s)
}

func checkExampleTargets(t *testing.T, s *Snapshot) {
	g := s.Target("gpt-4o")
	if g == nil || g.Cluster != "openai" || g.MaxConcurrent != 50 || len(g.Fallbacks) != 2 ||
		g.Retry == nil || g.Retry.Profile != "interactive" || g.Retry.MaxDelay != 10*time.Second ||
		g.RateLimit == nil || g.RateLimit.Algorithm != limiter.SlidingWindow || g.TokenLimit == nil ||
		g.DefaultMaxTokens != 4096 || g.StreamUsage != StreamUsageInject {
		t.Errorf("gpt-4o = %+v", g)
	}
	if m := s.Target("gpt-4o-mini"); m == nil || m.Model != "gpt-4o-mini" || m.RateLimit.Windows[0].Burst != 40 {
		t.Errorf("gpt-4o-mini = %+v", m)
	}
	if c := s.TargetByModel("claude-sonnet-4-5"); c == nil || c.Name != "claude-sonnet" || len(c.RateLimit.Windows) != 2 {
		t.Errorf("by model = %+v", c)
	}
	if ts := s.TargetsByCluster("openai"); len(ts) != 2 || s.TargetByCluster("openai").Name != "gpt-4o" {
		t.Errorf("by cluster = %v", ts)
	}
	if s.TargetByCluster("nope") != nil || len(s.Targets()) != 3 {
		t.Error("target lookups")
	}
}
