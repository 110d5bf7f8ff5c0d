package envoyapi_test

import (
	"testing"

	matcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	clustermatcherv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/router/cluster_specifiers/matcher/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typematcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// clusterOf is the cluster r sends a request with the headers sent to:
// its cluster, or what its matcher cluster specifier picks (a header
// input, an exact map, an optional on_no_match), as Envoy evaluates it.
func clusterOf(t *testing.T, r *routev3.Route, sent map[string]string) string {
	t.Helper()
	if c := r.GetRoute().GetCluster(); c != "" {
		return c
	}
	m := clusterMatcher(t, r)
	if m == nil {
		return ""
	}
	tree := m.GetMatcherTree()
	var in typematcherv3.HttpRequestHeaderMatchInput
	if err := tree.GetInput().GetTypedConfig().UnmarshalTo(&in); err != nil {
		t.Fatalf("route %s: cluster matcher input: %v", r.GetName(), err)
	}
	if v, ok := sent[in.GetHeaderName()]; ok {
		if om := tree.GetExactMatchMap().GetMap()[v]; om != nil {
			return clusterAction(t, om)
		}
	}
	if om := m.GetOnNoMatch(); om != nil {
		return clusterAction(t, om)
	}
	return ""
}

// clusterMatcher is r's matcher cluster specifier, nil when it has none.
func clusterMatcher(t *testing.T, r *routev3.Route) *matcherv3.Matcher {
	t.Helper()
	p := r.GetRoute().GetInlineClusterSpecifierPlugin()
	if p == nil {
		return nil
	}
	var cs clustermatcherv3.MatcherClusterSpecifier
	if err := p.GetExtension().GetTypedConfig().UnmarshalTo(&cs); err != nil {
		t.Fatalf("route %s: cluster specifier: %v", r.GetName(), err)
	}
	return cs.GetClusterMatcher()
}

func clusterAction(t *testing.T, om *matcherv3.Matcher_OnMatch) string {
	t.Helper()
	var a clustermatcherv3.ClusterAction
	if err := om.GetAction().GetTypedConfig().UnmarshalTo(&a); err != nil {
		t.Fatalf("cluster action: %v", err)
	}
	return a.GetCluster()
}

// TestEnvoyYAMLReselectsClusters: the route of the targets re-selects the
// cluster of every retry from x-resil-cluster, which the upstream
// ext_proc is told to write (x-resil-reselect), and every cluster that
// serves a target is one it can select.
func TestEnvoyYAMLReselectsClusters(t *testing.T) {
	b := loadBootstrap(t)
	snap := shippedTargets(t)
	rs := routes(t, b)
	for _, tg := range snap.Targets() {
		r := routeFor(t, rs, tg.Name, tg.Cluster)
		if r == nil || clusterMatcher(t, r) == nil || !r.GetRoute().GetRetryPolicy().GetRefreshClusterOnRetry() {
			t.Errorf("target %s: route %s does not re-select the cluster per attempt", tg.Name, r.GetName())
			continue
		}
		for _, c := range []string{"openai", "anthropic", "mock-llm"} {
			if got := clusterOf(t, r, map[string]string{"x-resil-cluster": c}); got != c {
				t.Errorf("route %s: x-resil-cluster %s selects %q", r.GetName(), c, got)
			}
		}
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == "ratelimit" {
			continue
		}
		ep := upstreamExtProc(t, c.GetName())
		reselect := false
		for _, h := range ep.GetGrpcService().GetInitialMetadata() {
			reselect = reselect || (h.GetKey() == "x-resil-reselect" && h.GetValue() == "true")
		}
		if !reselect {
			t.Errorf("cluster %s: the upstream ext_proc does not write the next attempt's cluster", c.GetName())
		}
	}
}

// upstreamExtProc is the ext_proc of a cluster's upstream filter chain.
func upstreamExtProc(t *testing.T, cluster string) *extprocfilterv3.ExternalProcessor {
	t.Helper()
	for _, c := range loadBootstrap(t).GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		var po upstreamhttpv3.HttpProtocolOptions
		if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil {
			t.Fatal(err)
		}
		return extProcOf(t, po.GetHttpFilters()[0].GetTypedConfig())
	}
	t.Fatalf("no cluster %s", cluster)
	return nil
}
