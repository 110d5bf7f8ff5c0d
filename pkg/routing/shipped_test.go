package routing_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// TestShippedProviderBreakerOpens: the targets of one provider in
// config/targets.yaml share their provider breaker, so it opens when two
// of them fail, and then refuses every target of that provider.
func TestShippedProviderBreakerOpens(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "targets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	snap := policy.Compile(policy.File{Name: "targets.yaml", Data: data})
	if policy.HasErrors(snap.Problems()) {
		t.Fatalf("targets.yaml: %v", snap.Problems())
	}
	byProvider := map[string][]*policy.Target{}
	for _, tg := range snap.Targets() {
		byProvider[tg.Provider] = append(byProvider[tg.Provider], tg)
	}
	for provider, tgs := range byProvider {
		if provider == "" || len(tgs) < 2 {
			continue
		}
		reg := resilience.NewRegistry()
		fail := resilience.Verdict{Class: resilience.ClassServer, CountTarget: true, CountProvider: true}
		for i := range 6 {
			reg.Record(routing.BreakerTarget(tgs[i%2]), fail)
		}
		for _, tg := range tgs {
			if a := reg.Status(routing.BreakerTarget(tg)); a.Allowed {
				t.Errorf("provider %s: target %s admitted after its provider's targets failed", provider, tg.Name)
			}
		}
	}
	if len(byProvider["openai"]) < 2 {
		t.Errorf("targets.yaml has %d openai targets, want at least 2", len(byProvider["openai"]))
	}
}
