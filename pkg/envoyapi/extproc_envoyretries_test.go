package envoyapi_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"
)

// shippedTargets compiles the targets envoy.yaml routes: the example
// policies and the demo's mock targets.
func shippedTargets(t *testing.T) *policy.Snapshot {
	t.Helper()
	var files []policy.File
	for _, p := range []string{"config/targets.yaml", "deploy/demo/mock-targets.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, policy.File{Name: p, Data: data})
	}
	snap := policy.Compile(files...)
	if policy.HasErrors(snap.Problems()) {
		t.Fatalf("targets: %v", snap.Problems())
	}
	return snap
}

// routeFor is the first route whose x-resil-target matcher takes name
// (a route without header matchers takes every name).
func routeFor(t *testing.T, rs []*routev3.Route, name string) *routev3.Route {
	t.Helper()
	for _, r := range rs {
		hs := r.GetMatch().GetHeaders()
		if len(hs) == 0 {
			return r
		}
		for _, h := range hs {
			sm := h.GetStringMatch()
			if h.GetName() != "x-resil-target" {
				continue
			}
			if sm.GetExact() == name && name != "" ||
				sm.GetSafeRegex() != nil && regexp.MustCompile("^(?:"+sm.GetSafeRegex().GetRegex()+")$").MatchString(name) {
				return r
			}
		}
	}
	return nil
}

// attemptsFor is how many attempts the service may ask for on a request
// for root in cluster: 1 + num_retries for each hop of root's chain that
// the cluster serves.
func attemptsFor(snap *policy.Snapshot, root *policy.Target, cluster string) int {
	n := 0
	for _, name := range resilience.Expand(root.Name, func(s string) []string { return snap.Target(s).Fallbacks }) {
		if hop := snap.Target(name); hop.Cluster == cluster {
			n += 1 + routing.RetryPolicy(hop).Profile().MaxRetries
		}
	}
	return n
}

// TestEnvoyYAMLRetriesPerTarget: each target's route lets Envoy make
// every attempt the service may ask for (its own retries, then its
// fallbacks' in the same cluster), so a target's retry_config, not the
// route, decides.
func TestEnvoyYAMLRetriesPerTarget(t *testing.T) {
	snap := shippedTargets(t)
	rs := routes(t, loadBootstrap(t))
	for _, tg := range snap.Targets() {
		r := routeFor(t, rs, tg.Name)
		if r == nil {
			t.Errorf("target %s: no route", tg.Name)
			continue
		}
		cluster := r.GetRoute().GetCluster()
		if cluster != tg.Cluster {
			t.Errorf("target %s (cluster %s) is routed to cluster %s", tg.Name, tg.Cluster, cluster)
		}
		want := attemptsFor(snap, tg, cluster) - 1
		if got := int(r.GetRoute().GetRetryPolicy().GetNumRetries().GetValue()); got < want {
			t.Errorf("target %s: route %s allows %d retries, the service may ask for %d", tg.Name, r.GetName(), got, want)
		}
	}
}
