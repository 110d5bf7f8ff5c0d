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

// routeFor is the first route whose header matchers take a request
// for the target name served by cluster: x-resil-target and
// x-resil-cluster as the downstream role writes them.
func routeFor(t *testing.T, rs []*routev3.Route, name, cluster string) *routev3.Route {
	t.Helper()
	sent := map[string]string{"x-resil-target": name, "x-resil-cluster": cluster}
	for _, r := range rs {
		if routeTakes(r, sent) {
			return r
		}
	}
	return nil
}

func routeTakes(r *routev3.Route, sent map[string]string) bool {
	for _, h := range r.GetMatch().GetHeaders() {
		v, ok := sent[h.GetName()]
		sm := h.GetStringMatch()
		switch {
		case h.GetPresentMatch():
			if !ok {
				return false
			}
		case sm.GetExact() != "":
			if v != sm.GetExact() {
				return false
			}
		case sm.GetSafeRegex() != nil:
			if !regexp.MustCompile("^(?:" + sm.GetSafeRegex().GetRegex() + ")$").MatchString(v) {
				return false
			}
		}
	}
	return true
}

// attemptsFor is how many attempts the service may ask for on a request
// for root: 1 + num_retries for each hop of root's chain, in any cluster
// when the route re-selects the cluster of each retry, else in cluster.
func attemptsFor(snap *policy.Snapshot, root *policy.Target, cluster string, reselect bool) int {
	n := 0
	for _, name := range resilience.Expand(root.Name, func(s string) []string { return snap.Target(s).Fallbacks }) {
		if hop := snap.Target(name); reselect || hop.Cluster == cluster {
			n += 1 + routing.RetryPolicy(hop).Profile().MaxRetries
		}
	}
	return n
}

// TestEnvoyYAMLRetriesPerTarget: each target's route sends it to its
// cluster and lets Envoy make every attempt the service may ask for (its
// own retries, then its fallbacks'), so a target's retry_config, not the
// route, decides.
func TestEnvoyYAMLRetriesPerTarget(t *testing.T) {
	snap := shippedTargets(t)
	rs := routes(t, loadBootstrap(t))
	for _, tg := range snap.Targets() {
		r := routeFor(t, rs, tg.Name, tg.Cluster)
		if r == nil {
			t.Errorf("target %s: no route", tg.Name)
			continue
		}
		cluster := clusterOf(t, r, map[string]string{"x-resil-target": tg.Name, "x-resil-cluster": tg.Cluster})
		if cluster != tg.Cluster {
			t.Errorf("target %s (cluster %s) is routed to cluster %s", tg.Name, tg.Cluster, cluster)
		}
		rp := r.GetRoute().GetRetryPolicy()
		want := attemptsFor(snap, tg, cluster, rp.GetRefreshClusterOnRetry()) - 1
		if got := int(rp.GetNumRetries().GetValue()); got < want {
			t.Errorf("target %s: route %s allows %d retries, the service may ask for %d", tg.Name, r.GetName(), got, want)
		}
	}
}
