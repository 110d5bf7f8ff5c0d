package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	clustermatcherv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/router/cluster_specifiers/matcher/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typematcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/routing"

	// The typed_config types the patches use, so their Any values resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

const istioDir = "envoy/istio"

type envoyFilterSpec struct {
	WorkloadSelector struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"workloadSelector"`
	ConfigPatches []configPatch `yaml:"configPatches"`
}

type configPatch struct {
	ApplyTo string `yaml:"applyTo"`
	Match   struct {
		Context  string `yaml:"context"`
		Listener *struct {
			FilterChain struct {
				Filter struct {
					Name      string `yaml:"name"`
					SubFilter struct {
						Name string `yaml:"name"`
					} `yaml:"subFilter"`
				} `yaml:"filter"`
			} `yaml:"filterChain"`
		} `yaml:"listener"`
		RouteConfiguration *struct {
			Vhost struct {
				Name  string `yaml:"name"`
				Route *struct {
					Action string `yaml:"action"`
				} `yaml:"route"`
			} `yaml:"vhost"`
		} `yaml:"routeConfiguration"`
		Cluster *struct {
			Service    string `yaml:"service"`
			PortNumber int    `yaml:"portNumber"`
		} `yaml:"cluster"`
	} `yaml:"match"`
	Patch struct {
		Operation string         `yaml:"operation"`
		Value     map[string]any `yaml:"value"`
	} `yaml:"patch"`
}

// operations lists, per applyTo, the operations Istio accepts.
var operations = map[string][]string{
	"HTTP_FILTER":         {"INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "MERGE", "REMOVE", "REPLACE"},
	"CLUSTER":             {"ADD", "MERGE", "REMOVE", "REPLACE"},
	"LISTENER":            {"ADD", "MERGE", "REMOVE"},
	"VIRTUAL_HOST":        {"ADD", "MERGE", "REMOVE", "REPLACE"},
	"ROUTE_CONFIGURATION": {"MERGE"},
	"HTTP_ROUTE":          {"INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "MERGE", "REMOVE"},
	"NETWORK_FILTER":      {"INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "MERGE", "REMOVE", "REPLACE"},
}

// istio is the decoded envoy/istio directory.
type istio struct {
	objs    []*object
	filters map[string]*envoyFilterSpec
}

func loadIstio(t *testing.T) *istio {
	t.Helper()
	is := &istio{objs: loadObjects(t, istioDir), filters: map[string]*envoyFilterSpec{}}
	for _, o := range is.objs {
		if o.Metadata.Namespace != "istio-system" {
			t.Errorf("%s: %s %s in namespace %q, want istio-system", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
		if o.Kind == "EnvoyFilter" {
			is.filters[o.Metadata.Name] = spec[envoyFilterSpec](t, o)
		}
	}
	if len(is.filters) == 0 {
		t.Fatal("no EnvoyFilter")
	}
	return is
}

func (is *istio) patches(applyTo, op string) []configPatch {
	var ps []configPatch
	for _, name := range []string{"ratelimit-svc-gateway", "ratelimit-svc-upstream"} {
		for _, p := range is.filters[name].ConfigPatches {
			if p.ApplyTo == applyTo && p.Patch.Operation == op {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// configMapGenerator is the part of a kustomization that generates or
// merges ConfigMaps.
type configMapGenerator struct {
	Name      string   `yaml:"name"`
	Namespace string   `yaml:"namespace"`
	Behavior  string   `yaml:"behavior"`
	Files     []string `yaml:"files"`
	Options   struct {
		DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
	} `yaml:"options"`
}

// istioPolicies compiles the policies the service reads under Istio: the
// ConfigMap of envoy/k8s with the files envoy/istio's kustomization
// merges into it (a key per file: "key=path", or the file's base name).
func istioPolicies(t *testing.T) *policy.Snapshot {
	t.Helper()
	cm := mustFind(t, loadObjects(t, k8sDir), "ConfigMap", "ratelimit-config")
	var k struct {
		ConfigMapGenerator []configMapGenerator `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(readFile(t, istioDir, "kustomization.yaml"), &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", istioDir, err)
	}
	data := maps.Clone(cm.Data)
	for _, g := range k.ConfigMapGenerator {
		// merge keeps the other keys; the name must not change either,
		// as the service applies an edited ConfigMap without a restart.
		if g.Name != cm.Metadata.Name || g.Namespace != cm.Metadata.Namespace || g.Behavior != "merge" ||
			!g.Options.DisableNameSuffixHash {
			t.Errorf("%s/kustomization.yaml: configMapGenerator %s/%s behavior %q, hash suffix off %v: want a merge into %s/%s",
				istioDir, g.Namespace, g.Name, g.Behavior, g.Options.DisableNameSuffixHash, cm.Metadata.Namespace, cm.Metadata.Name)
		}
		for _, f := range g.Files {
			key, path, ok := strings.Cut(f, "=")
			if !ok {
				key, path = filepath.Base(f), f
			}
			data[key] = string(readFile(t, istioDir, path))
		}
	}
	var files []policy.File
	for key, v := range data {
		files = append(files, policy.File{Name: "/etc/ratelimit/config/" + key, Data: []byte(v)})
	}
	return compileClean(t, "ConfigMap ratelimit-config under Istio", files)
}

// upstreamClusters names the clusters the CLUSTER MERGE patches (the
// upstream ext_proc) apply to, as Istio names them.
func upstreamClusters(is *istio) map[string]bool {
	out := map[string]bool{}
	for _, p := range is.patches("CLUSTER", "MERGE") {
		if m := p.Match.Cluster; m != nil {
			out[outboundCluster(m.Service, m.PortNumber)] = true
		}
	}
	return out
}

// TestIstioTargets: the targets under Istio are config/'s, each naming
// the cluster Istio generates for its provider (outbound|port||api_host),
// a ServiceEntry port whose cluster runs the upstream ext_proc, so the
// upstream role finds the hops of an attempt's cluster (xds.cluster_name).
func TestIstioTargets(t *testing.T) {
	is := loadIstio(t)
	got := istioPolicies(t)
	want := compileClean(t, "config/", policyFiles(t, "config", "config/"))
	if g, w := targetNames(got), targetNames(want); !slices.Equal(g, w) {
		t.Fatalf("targets under Istio %v, config/ has %v", g, w)
	}
	patched := upstreamClusters(is)
	for _, w := range want.Targets() {
		g := *got.Target(w.Name)
		if want := outboundCluster(g.APIHost, 80); g.Cluster != want || !patched[g.Cluster] {
			t.Errorf("target %s: cluster %q, want %s with the upstream ext_proc", g.Name, g.Cluster, want)
		}
		if !meshHTTPPort(t, is, g.APIHost, 80) {
			t.Errorf("target %s: %s:80 is no HTTP ServiceEntry port with TLS origination", g.Name, g.APIHost)
		}
		w := *w
		g.Cluster, g.File, w.Cluster, w.File = "", "", "", ""
		if !reflect.DeepEqual(g, w) {
			t.Errorf("target %s differs from config/'s but for its cluster:\n istio:   %s\n config/: %s", g.Name, describe(t, &g), describe(t, &w))
		}
	}
	for c := range patched {
		if len(got.TargetsByCluster(c)) == 0 {
			t.Errorf("cluster %s runs the upstream ext_proc but serves no target", c)
		}
	}
}

// describe shows a target with its limits.
func describe(t *testing.T, tg *policy.Target) string {
	t.Helper()
	return fmt.Sprintf("%s rate %+v tokens %+v", toJSON(t, tg), tg.RateLimit, tg.TokenLimit)
}

// k8sGRPCService is the ratelimit-svc Service's DNS name and gRPC port.
func k8sGRPCService(t *testing.T) (string, uint32) {
	t.Helper()
	o := mustFind(t, loadObjects(t, k8sDir), "Service", "ratelimit-svc")
	for _, p := range spec[serviceSpec](t, o).Ports {
		if p.Name == "grpc" {
			return o.Metadata.Name + "." + o.Metadata.Namespace + ".svc.cluster.local", uint32(p.Port)
		}
	}
	t.Fatal("Service ratelimit-svc has no grpc port")
	return "", 0
}

func TestIstioEnvoyFilters(t *testing.T) {
	is := loadIstio(t)
	for name, f := range is.filters {
		if f.WorkloadSelector.Labels["istio"] != "ingressgateway" {
			t.Errorf("EnvoyFilter %s selects %v, want the ingress gateway", name, f.WorkloadSelector.Labels)
		}
		for i, p := range f.ConfigPatches {
			if !slices.Contains(operations[p.ApplyTo], p.Patch.Operation) {
				t.Errorf("%s patch %d: %s on %s", name, i, p.Patch.Operation, p.ApplyTo)
			}
			if p.Match.Context != "GATEWAY" {
				t.Errorf("%s patch %d: context %q, want GATEWAY", name, i, p.Match.Context)
			}
			if p.Patch.Value == nil {
				t.Errorf("%s patch %d: no value", name, i)
			}
		}
	}
	for _, want := range []string{"ratelimit-svc-gateway", "ratelimit-svc-upstream"} {
		if is.filters[want] == nil {
			t.Errorf("no EnvoyFilter %s", want)
		}
	}
}

// addedCluster is the CLUSTER ADD patch: the cluster both filters call.
func addedCluster(t *testing.T, is *istio) *clusterv3.Cluster {
	t.Helper()
	ps := is.patches("CLUSTER", "ADD")
	if len(ps) != 1 {
		t.Fatalf("%d CLUSTER ADD patches, want 1", len(ps))
	}
	var c clusterv3.Cluster
	if !decodeProto(t, "CLUSTER ADD", ps[0].Patch.Value, &c) {
		t.FailNow()
	}
	return &c
}

func TestIstioRateLimitCluster(t *testing.T) {
	c := addedCluster(t, loadIstio(t))
	if err := c.ValidateAll(); err != nil {
		t.Error(err)
	}
	validateTree(t, c.ProtoReflect(), "cluster "+c.GetName())
	if c.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("cluster type %v, want STRICT_DNS", c.GetType())
	}
	var po upstreamhttpv3.HttpProtocolOptions
	if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil {
		t.Fatalf("HttpProtocolOptions: %v", err)
	}
	if po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("the ratelimit cluster is not HTTP/2")
	}
	host, port := k8sGRPCService(t)
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("endpoints %v", eps)
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || sa.GetPortValue() != port {
		t.Errorf("cluster points at %s:%d, the Service is %s:%d", sa.GetAddress(), sa.GetPortValue(), host, port)
	}
	hc := c.GetHealthChecks()
	if len(hc) != 1 || hc[0].GetGrpcHealthCheck().GetServiceName() != "ratelimit" {
		t.Errorf("health checks %v, want gRPC on \"ratelimit\"", hc)
	}
}

// httpFilters decodes the HTTP_FILTER patches, in patch order.
func httpFilters(t *testing.T, is *istio) []*hcmv3.HttpFilter {
	t.Helper()
	var fs []*hcmv3.HttpFilter
	for i, p := range is.patches("HTTP_FILTER", "INSERT_BEFORE") {
		l := p.Match.Listener
		if l == nil || l.FilterChain.Filter.Name != "envoy.filters.network.http_connection_manager" ||
			l.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
			t.Errorf("HTTP_FILTER patch %d does not insert before the HCM's router", i)
		}
		var f hcmv3.HttpFilter
		if decodeProto(t, "HTTP_FILTER patch "+strconv.Itoa(i), p.Patch.Value, &f) {
			fs = append(fs, &f)
		}
	}
	return fs
}

// envoyYAML is the demo bootstrap the Istio patches mirror.
func envoyYAML(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(readFile(t, "envoy", "envoy.yaml"), &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(toJSON(t, doc), &b); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	return &b
}

func envoyYAMLHCM(t *testing.T) *hcmv3.HttpConnectionManager {
	t.Helper()
	var hcm hcmv3.HttpConnectionManager
	for _, l := range envoyYAML(t).GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetTypedConfig().MessageIs(&hcm) {
					if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
						t.Fatal(err)
					}
					return &hcm
				}
			}
		}
	}
	t.Fatal("envoy.yaml has no HTTP connection manager")
	return nil
}

func extProcOf(t *testing.T, f *hcmv3.HttpFilter) *extprocv3.ExternalProcessor {
	t.Helper()
	var ep extprocv3.ExternalProcessor
	if err := f.GetTypedConfig().UnmarshalTo(&ep); err != nil {
		t.Fatalf("%s: %v", f.GetName(), err)
	}
	return &ep
}

func role(ep *extprocv3.ExternalProcessor) string { return metadata(ep, "x-resil-role") }

// sameExtProc compares two ext_proc configurations but for the cluster
// they call.
func sameExtProc(a, b *extprocv3.ExternalProcessor) bool {
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	a.GetGrpcService().GetEnvoyGrpc().ClusterName = ""
	b.GetGrpcService().GetEnvoyGrpc().ClusterName = ""
	return proto.Equal(a, b)
}

// metadata is the value of key in ep's gRPC initial metadata.
func metadata(ep *extprocv3.ExternalProcessor, key string) string {
	for _, h := range ep.GetGrpcService().GetInitialMetadata() {
		if h.GetKey() == key {
			return h.GetValue()
		}
	}
	return ""
}

func TestIstioHTTPFilters(t *testing.T) {
	is := loadIstio(t)
	cluster := addedCluster(t, is).GetName()
	fs := httpFilters(t, is)
	var names []string
	for _, f := range fs {
		names = append(names, f.GetName())
		if err := f.ValidateAll(); err != nil {
			t.Errorf("%s: %v", f.GetName(), err)
		}
		validateTree(t, f.ProtoReflect(), f.GetName())
	}
	// Each inserted before the router, in patch order.
	if !slices.Equal(names, []string{"envoy.filters.http.ext_proc", "envoy.filters.http.ratelimit", "envoy.filters.http.ratelimit.tokens"}) {
		t.Fatalf("HTTP filters %v, want ext_proc then ratelimit (api, then llm tokens)", names)
	}

	ep := extProcOf(t, fs[0])
	pm := ep.GetProcessingMode()
	if role(ep) != "downstream" || pm.GetRequestBodyMode() != extprocv3.ProcessingMode_BUFFERED ||
		pm.GetResponseHeaderMode() != extprocv3.ProcessingMode_SEND || !ep.GetAllowModeOverride() {
		t.Errorf("downstream ext_proc: role %q, mode %v, allow_mode_override %v", role(ep), pm, ep.GetAllowModeOverride())
	}
	if got := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster {
		t.Errorf("ext_proc calls cluster %q, the patch adds %q", got, cluster)
	}

	var rl ratelimitv3.RateLimit
	if err := fs[1].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if got := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster {
		t.Errorf("ratelimit calls cluster %q, the patch adds %q", got, cluster)
	}
	if rl.GetRateLimitService().GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Error("ratelimit transport_api_version is not V3")
	}
	if istioPolicies(t).Domain(rl.GetDomain()) == nil {
		t.Errorf("ratelimit domain %q is not in the ConfigMap's policies", rl.GetDomain())
	}

	// The same processing as the demo's envoy.yaml.
	for _, f := range envoyYAMLHCM(t).GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ext_proc" && !sameExtProc(extProcOf(t, f), ep) {
			t.Errorf("downstream ext_proc differs from envoy.yaml's:\n istio: %v\n envoy.yaml: %v", ep, extProcOf(t, f))
		}
	}
}

// istioCluster is roughly what Istio generates for a ServiceEntry host on
// an HTTP port, before the MERGE patch.
func istioCluster(host string, port int) *clusterv3.Cluster {
	name := outboundCluster(host, port)
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STRICT_DNS},
		ConnectTimeout:       durationpb.New(10e9),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 443}}}}}},
			}}}},
		},
	}
}

type serviceEntrySpec struct {
	Hosts []string `yaml:"hosts"`
	Ports []struct {
		Number     int    `yaml:"number"`
		Name       string `yaml:"name"`
		Protocol   string `yaml:"protocol"`
		TargetPort int    `yaml:"targetPort"`
	} `yaml:"ports"`
}

type destinationRuleSpec struct {
	Host          string `yaml:"host"`
	TrafficPolicy struct {
		PortLevelSettings []struct {
			Port struct {
				Number int `yaml:"number"`
			} `yaml:"port"`
			TLS struct {
				Mode string `yaml:"mode"`
				SNI  string `yaml:"sni"`
			} `yaml:"tls"`
		} `yaml:"portLevelSettings"`
	} `yaml:"trafficPolicy"`
}

// meshHTTPPort says whether host:port is an HTTP port of a ServiceEntry
// with TLS originated by a DestinationRule.
func meshHTTPPort(t *testing.T, is *istio, host string, port int) bool {
	t.Helper()
	http, tls := false, false
	for _, o := range is.objs {
		switch o.Kind {
		case "ServiceEntry":
			se := spec[serviceEntrySpec](t, o)
			if !slices.Contains(se.Hosts, host) {
				continue
			}
			for _, p := range se.Ports {
				http = http || (p.Number == port && p.Protocol == "HTTP")
			}
		case "DestinationRule":
			dr := spec[destinationRuleSpec](t, o)
			if dr.Host != host {
				continue
			}
			for _, s := range dr.TrafficPolicy.PortLevelSettings {
				tls = tls || (s.Port.Number == port && s.TLS.Mode == "SIMPLE" && s.TLS.SNI == host)
			}
		}
	}
	return http && tls
}

func TestIstioUpstreamExtProc(t *testing.T) {
	is := loadIstio(t)
	cluster := addedCluster(t, is).GetName()
	ps := is.patches("CLUSTER", "MERGE")
	if len(ps) < 2 {
		t.Fatalf("%d provider cluster patches", len(ps))
	}
	var upstream *extprocv3.ExternalProcessor
	for _, f := range envoyYAMLClusterFilters(t) {
		if f.GetName() == "envoy.filters.http.ext_proc" {
			upstream = extProcOf(t, f)
		}
	}
	for i, p := range ps {
		m := p.Match.Cluster
		if m == nil || m.Service == "" {
			t.Errorf("CLUSTER MERGE %d matches no service", i)
			continue
		}
		if !meshHTTPPort(t, is, m.Service, m.PortNumber) {
			t.Errorf("CLUSTER MERGE %d: %s:%d is no HTTP ServiceEntry port with TLS origination", i, m.Service, m.PortNumber)
		}
		if !equalJSON(t, p.Patch.Value, ps[0].Patch.Value) {
			t.Errorf("CLUSTER MERGE %d (%s) differs from the first: keep the providers' filters alike", i, m.Service)
		}
		var patch clusterv3.Cluster
		if !decodeProto(t, "CLUSTER MERGE "+m.Service, p.Patch.Value, &patch) {
			continue
		}
		c := istioCluster(m.Service, m.PortNumber)
		proto.Merge(c, &patch)
		if err := c.ValidateAll(); err != nil {
			t.Errorf("%s after MERGE: %v", c.GetName(), err)
		}
		validateTree(t, c.ProtoReflect(), c.GetName())

		var po upstreamhttpv3.HttpProtocolOptions
		if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil {
			t.Errorf("%s: HttpProtocolOptions: %v", c.GetName(), err)
			continue
		}
		fs := po.GetHttpFilters()
		if len(fs) != 2 || fs[0].GetName() != "envoy.filters.http.ext_proc" || fs[1].GetName() != "envoy.filters.http.upstream_codec" {
			t.Errorf("%s: upstream filters %v, want ext_proc then upstream_codec", c.GetName(), fs)
			continue
		}
		ep := extProcOf(t, fs[0])
		if role(ep) != "upstream" || !ep.GetAllowModeOverride() || !slices.Contains(ep.GetRequestAttributes(), "xds.cluster_name") {
			t.Errorf("%s: upstream ext_proc role %q, allow_mode_override %v, attributes %v", c.GetName(), role(ep),
				ep.GetAllowModeOverride(), ep.GetRequestAttributes())
		}
		if got := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != cluster {
			t.Errorf("%s: ext_proc calls %q, the patch adds %q", c.GetName(), got, cluster)
		}
		// The gateway's route re-selects each retry's cluster from the
		// x-resil-cluster this filter writes when told so.
		if got := metadata(ep, "x-resil-reselect"); got != "true" {
			t.Errorf("%s: upstream ext_proc x-resil-reselect %q, want \"true\": no retry would leave the cluster", c.GetName(), got)
		}
		if upstream != nil && !sameExtProc(ep, upstream) {
			t.Errorf("%s: upstream ext_proc differs from envoy.yaml's:\n istio: %v\n envoy.yaml: %v", c.GetName(), ep, upstream)
		}
	}
}

func envoyYAMLClusterFilters(t *testing.T) []*hcmv3.HttpFilter {
	t.Helper()
	for _, c := range envoyYAML(t).GetStaticResources().GetClusters() {
		a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if a == nil {
			continue
		}
		var po upstreamhttpv3.HttpProtocolOptions
		if err := a.UnmarshalTo(&po); err != nil {
			t.Fatal(err)
		}
		if len(po.GetHttpFilters()) > 0 {
			return po.GetHttpFilters()
		}
	}
	return nil
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	var x, y any
	json.Unmarshal(toJSON(t, a), &x)
	json.Unmarshal(toJSON(t, b), &y)
	return string(toJSON(t, x)) == string(toJSON(t, y))
}

type gatewaySpec struct {
	Selector map[string]string `yaml:"selector"`
	Servers  []struct {
		Port struct {
			Number   int    `yaml:"number"`
			Protocol string `yaml:"protocol"`
		} `yaml:"port"`
		Hosts []string `yaml:"hosts"`
	} `yaml:"servers"`
}

type vsRoute struct {
	Name  string `yaml:"name"`
	Match []struct {
		Headers map[string]struct {
			Exact string `yaml:"exact"`
			Regex string `yaml:"regex"`
		} `yaml:"headers"`
	} `yaml:"match"`
	Rewrite *struct {
		Authority string `yaml:"authority"`
	} `yaml:"rewrite"`
	Route []struct {
		Destination struct {
			Host string `yaml:"host"`
			Port struct {
				Number int `yaml:"number"`
			} `yaml:"port"`
		} `yaml:"destination"`
	} `yaml:"route"`
	Timeout string `yaml:"timeout"`
	Retries *struct {
		Attempts int    `yaml:"attempts"`
		RetryOn  string `yaml:"retryOn"`
	} `yaml:"retries"`
}

type virtualServiceSpec struct {
	Hosts    []string  `yaml:"hosts"`
	Gateways []string  `yaml:"gateways"`
	HTTP     []vsRoute `yaml:"http"`
}

// outboundCluster is the name Istio gives the cluster of a service port.
func outboundCluster(host string, port int) string {
	return "outbound|" + strconv.Itoa(port) + "||" + host
}

// gatewayVS is the Gateway's virtual host name, as Istio names it, and
// the VirtualService bound to it.
func gatewayVS(t *testing.T, is *istio) (string, *virtualServiceSpec) {
	t.Helper()
	gw := spec[gatewaySpec](t, mustFind(t, is.objs, "Gateway", "llm"))
	vs := spec[virtualServiceSpec](t, mustFind(t, is.objs, "VirtualService", "llm"))
	if gw.Selector["istio"] != "ingressgateway" || len(gw.Servers) != 1 || len(gw.Servers[0].Hosts) != 1 {
		t.Fatalf("Gateway %+v", gw)
	}
	host := gw.Servers[0].Hosts[0]
	if !slices.Equal(vs.Hosts, []string{host}) || !slices.Equal(vs.Gateways, []string{"llm"}) {
		t.Errorf("VirtualService hosts %v gateways %v", vs.Hosts, vs.Gateways)
	}
	return host + ":" + strconv.Itoa(gw.Servers[0].Port.Number), vs
}

// TestIstioRoutes checks that the VirtualService sends the first attempt
// of every target to the cluster the downstream role names in
// x-resil-cluster: a route matching that name exactly, whose destination
// is the provider's cluster of that name.
func TestIstioRoutes(t *testing.T) {
	is := loadIstio(t)
	_, vs := gatewayVS(t, is)
	routed := map[string]string{} // x-resil-cluster → the route's cluster
	for _, r := range vs.HTTP {
		if len(r.Route) != 1 {
			t.Errorf("route %s has %d destinations, want 1", r.Name, len(r.Route))
			continue
		}
		d := r.Route[0].Destination
		if !meshHTTPPort(t, is, d.Host, d.Port.Number) {
			t.Errorf("route %s goes to %s:%d, no provider ServiceEntry", r.Name, d.Host, d.Port.Number)
		}
		for _, m := range r.Match {
			h, ok := m.Headers["x-resil-cluster"]
			if !ok || h.Exact == "" || len(m.Headers) != 1 {
				t.Errorf("route %s matches %v, want x-resil-cluster exactly", r.Name, m.Headers)
				continue
			}
			routed[h.Exact] = outboundCluster(d.Host, d.Port.Number)
		}
		if r.Retries == nil || !strings.Contains(r.Retries.RetryOn, "retriable-headers") {
			t.Errorf("route %s does not retry on retriable-headers", r.Name)
		}
	}
	for _, tg := range istioPolicies(t).Targets() {
		if got, ok := routed[tg.Cluster]; !ok || got != tg.Cluster {
			t.Errorf("target %s: x-resil-cluster %s is routed to %q", tg.Name, tg.Cluster, got)
		}
	}
}

// TestIstioVirtualHostPatch: rate limit actions producing descriptors the
// domain limits, and the attempt count.
func TestIstioVirtualHostPatch(t *testing.T) {
	is := loadIstio(t)
	vhost, vs := gatewayVS(t, is)
	vps := is.patches("VIRTUAL_HOST", "MERGE")
	if len(vps) != 1 {
		t.Fatalf("%d VIRTUAL_HOST patches", len(vps))
	}
	if rc := vps[0].Match.RouteConfiguration; rc == nil || rc.Vhost.Name != vhost {
		t.Errorf("VIRTUAL_HOST patch matches %+v, want vhost %s", rc, vhost)
	}
	var vpatch routev3.VirtualHost
	if !decodeProto(t, "VIRTUAL_HOST", vps[0].Patch.Value, &vpatch) {
		return
	}
	vh := &routev3.VirtualHost{Name: vhost, Domains: []string{vs.Hosts[0], vs.Hosts[0] + ":*"}}
	proto.Merge(vh, &vpatch)
	if err := vh.ValidateAll(); err != nil {
		t.Error(err)
	}
	if !vh.GetIncludeRequestAttemptCount() {
		t.Error("include_request_attempt_count is off: the upstream ext_proc counts attempts")
	}
	checkRateLimitActions(t, vh.GetRateLimits(), istioPolicies(t), domainsOf(t, is))
}

// istioRoute is roughly the Envoy route Istio generates for a route of
// the VirtualService, before the HTTP_ROUTE patch.
func istioRoute(t *testing.T, r vsRoute) *routev3.Route {
	t.Helper()
	d := r.Route[0].Destination
	a := &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: outboundCluster(d.Host, d.Port.Number)},
		RetryPolicy:      &routev3.RetryPolicy{RetryOn: r.Retries.RetryOn, NumRetries: wrapperspb.UInt32(uint32(r.Retries.Attempts))},
	}
	if r.Rewrite != nil && r.Rewrite.Authority != "" {
		a.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: r.Rewrite.Authority}
	}
	if r.Timeout != "" {
		d, err := time.ParseDuration(r.Timeout)
		if err != nil {
			t.Fatalf("route %s: timeout: %v", r.Name, err)
		}
		a.Timeout = durationpb.New(d)
	}
	return &routev3.Route{Name: r.Name, Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: a}}
}

// patchedRoutes decodes the HTTP_ROUTE patch and merges it into each
// route Istio generates from the VirtualService, as Istio's MERGE does
// for these fields: a oneof member replaces the one set, scalars and
// durations replace, lists append.
func patchedRoutes(t *testing.T, is *istio) []*routev3.Route {
	t.Helper()
	vhost, vs := gatewayVS(t, is)
	rps := is.patches("HTTP_ROUTE", "MERGE")
	if len(rps) != 1 {
		t.Fatalf("%d HTTP_ROUTE patches", len(rps))
	}
	if rc := rps[0].Match.RouteConfiguration; rc == nil || rc.Vhost.Name != vhost || rc.Vhost.Route == nil ||
		rc.Vhost.Route.Action != "ROUTE" {
		t.Errorf("HTTP_ROUTE patch matches %+v, want the ROUTE routes of vhost %s", rc, vhost)
	}
	var rpatch routev3.Route
	if !decodeProto(t, "HTTP_ROUTE", rps[0].Patch.Value, &rpatch) {
		t.FailNow()
	}
	var out []*routev3.Route
	for _, vr := range vs.HTTP {
		if len(vr.Route) != 1 || vr.Retries == nil {
			t.Fatalf("route %s: %d destinations, retries %v", vr.Name, len(vr.Route), vr.Retries)
		}
		r := istioRoute(t, vr)
		proto.Merge(r, &rpatch)
		if err := r.ValidateAll(); err != nil {
			t.Errorf("route %s: %v", r.GetName(), err)
		}
		validateTree(t, r.ProtoReflect(), "route "+r.GetName())
		out = append(out, r)
	}
	return out
}

// TestIstioRoutePatch: every route of the gateway picks each attempt's
// cluster from x-resil-cluster, the Istio cluster of every target, and
// re-selects it before each retry, with room for every attempt of the
// longest chain across clusters and the retry policy the upstream role
// drives.
func TestIstioRoutePatch(t *testing.T) {
	is := loadIstio(t)
	snap := istioPolicies(t)
	want := 0
	for _, tg := range snap.Targets() {
		want = max(want, attemptsAcross(snap, tg)-1)
	}
	for _, r := range patchedRoutes(t, is) {
		a := r.GetRoute()
		if a.GetCluster() != "" || a.GetInlineClusterSpecifierPlugin() == nil {
			t.Errorf("route %s: cluster %q: the patch does not pick the cluster per attempt", r.GetName(), a.GetCluster())
			continue
		}
		for _, tg := range snap.Targets() {
			if got := clusterOf(t, r, map[string]string{"x-resil-cluster": tg.Cluster}); got != tg.Cluster {
				t.Errorf("route %s: x-resil-cluster %s (target %s) selects %q", r.GetName(), tg.Cluster, tg.Name, got)
			}
		}
		for key, c := range specifierMap(t, r) {
			if key != c || len(snap.TargetsByCluster(c)) == 0 {
				t.Errorf("route %s: x-resil-cluster %s selects %s, which serves no target", r.GetName(), key, c)
			}
		}
		if !a.GetAutoHostRewrite().GetValue() || a.GetHostRewriteLiteral() != "" {
			t.Errorf("route %s: Host rewrite %v: each attempt needs its cluster's host", r.GetName(), a.GetHostRewriteSpecifier())
		}
		rp := a.GetRetryPolicy()
		if !rp.GetRefreshClusterOnRetry() {
			t.Errorf("route %s: refresh_cluster_on_retry is off: a retry stays in the first attempt's cluster", r.GetName())
		}
		if got := int(rp.GetNumRetries().GetValue()); got < want {
			t.Errorf("route %s allows %d retries, the longest chain across clusters %d", r.GetName(), got, want)
		}
		checkRetryHeaders(t, r.GetName(), rp)
	}
}

// TestIstioFallbackAcrossClusters follows the upstream role's plan for
// the next attempt (routing.NextCluster, every hop eligible) for each hop
// of each target's chain, its retries spent: the plan names the Istio
// cluster of a hop of the chain, which runs the upstream ext_proc, and
// the gateway's routes send the attempt there. gpt-4o-mini, past its
// retries, leaves the openai cluster for Anthropic's.
func TestIstioFallbackAcrossClusters(t *testing.T) {
	is := loadIstio(t)
	snap := istioPolicies(t)
	rs := patchedRoutes(t, is)
	patched := upstreamClusters(is)
	router := routing.New(routing.Deps{})
	plans := map[string]string{} // "root/hop" → the next attempt's cluster
	for _, root := range snap.Targets() {
		chain := resilience.Expand(root.Name, func(s string) []string { return snap.Target(s).Fallbacks })
		for _, name := range chain {
			hop := snap.Target(name)
			plan := router.NextCluster(snap, root, hop, routing.RetryPolicy(hop).Profile().MaxRetries)
			plans[root.Name+"/"+hop.Name] = plan
			if !patched[plan] || !slices.ContainsFunc(snap.TargetsByCluster(plan), func(tg *policy.Target) bool {
				return slices.Contains(chain, tg.Name)
			}) {
				t.Errorf("request for %s, %s past its retries: next attempt planned for %q, no cluster of the chain with the upstream ext_proc",
					root.Name, hop.Name, plan)
			}
			for _, r := range rs {
				if got := clusterOf(t, r, map[string]string{"x-resil-cluster": plan}); got != plan {
					t.Errorf("route %s sends the attempt planned for %s to %q", r.GetName(), plan, got)
				}
			}
		}
	}
	if got, want := plans["gpt-4o-mini/gpt-4o-mini"], snap.Target("claude-sonnet").Cluster; got != want {
		t.Errorf("gpt-4o-mini past its retries: next attempt planned for %q, want claude-sonnet's %s", got, want)
	}
}

// attemptsAcross is how many attempts the service may ask for on a
// request for root when each retry may change cluster: 1 + num_retries
// for each hop of root's chain.
func attemptsAcross(snap *policy.Snapshot, root *policy.Target) int {
	n := 0
	for _, name := range resilience.Expand(root.Name, func(s string) []string { return snap.Target(s).Fallbacks }) {
		n += 1 + routing.RetryPolicy(snap.Target(name)).Profile().MaxRetries
	}
	return n
}

func checkRetryHeaders(t *testing.T, route string, rp *routev3.RetryPolicy) {
	t.Helper()
	rl := rp.GetRateLimitedRetryBackOff()
	ok := len(rp.GetRetriableHeaders()) == 1 && rp.GetRetriableHeaders()[0].GetName() == "x-resil-retry" &&
		len(rl.GetResetHeaders()) == 1 && rl.GetResetHeaders()[0].GetName() == "x-resil-retry-after" &&
		rl.GetResetHeaders()[0].GetFormat() == routev3.RetryPolicy_SECONDS
	if !ok {
		t.Errorf("route %s: retry policy %v does not read x-resil-retry and x-resil-retry-after", route, rp)
	}
	longest := max(resilience.Standard().MaxHintWait, resilience.Interactive().MaxHintWait)
	if got := rl.GetMaxInterval().AsDuration(); got < longest {
		t.Errorf("route %s: rate_limited_retry_back_off.max_interval %v: Envoy would ignore hints up to %v", route, got, longest)
	}
}

// clusterMatcher is r's inline matcher cluster specifier.
func clusterMatcher(t *testing.T, r *routev3.Route) *xdsmatcherv3.Matcher {
	t.Helper()
	var cs clustermatcherv3.MatcherClusterSpecifier
	if err := r.GetRoute().GetInlineClusterSpecifierPlugin().GetExtension().GetTypedConfig().UnmarshalTo(&cs); err != nil {
		t.Fatalf("route %s: cluster specifier: %v", r.GetName(), err)
	}
	return cs.GetClusterMatcher()
}

// clusterOf is the cluster r's specifier picks for a request with the
// headers sent (a header input, an exact map, an optional on_no_match),
// as Envoy evaluates it; "" for none.
func clusterOf(t *testing.T, r *routev3.Route, sent map[string]string) string {
	t.Helper()
	m := clusterMatcher(t, r)
	var in typematcherv3.HttpRequestHeaderMatchInput
	if err := m.GetMatcherTree().GetInput().GetTypedConfig().UnmarshalTo(&in); err != nil {
		t.Fatalf("route %s: cluster matcher input: %v", r.GetName(), err)
	}
	if v, ok := sent[in.GetHeaderName()]; ok {
		if om := m.GetMatcherTree().GetExactMatchMap().GetMap()[v]; om != nil {
			return clusterAction(t, om)
		}
	}
	if om := m.GetOnNoMatch(); om != nil {
		return clusterAction(t, om)
	}
	return ""
}

// specifierMap is r's specifier as a map from header value to cluster.
func specifierMap(t *testing.T, r *routev3.Route) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, om := range clusterMatcher(t, r).GetMatcherTree().GetExactMatchMap().GetMap() {
		out[k] = clusterAction(t, om)
	}
	return out
}

func clusterAction(t *testing.T, om *xdsmatcherv3.Matcher_OnMatch) string {
	t.Helper()
	var a clustermatcherv3.ClusterAction
	if err := om.GetAction().GetTypedConfig().UnmarshalTo(&a); err != nil {
		t.Fatalf("cluster action: %v", err)
	}
	return a.GetCluster()
}

// TestIstioListenerPatch: room for whole prompts.
func TestIstioListenerPatch(t *testing.T) {
	lps := loadIstio(t).patches("LISTENER", "MERGE")
	if len(lps) != 1 {
		t.Fatalf("%d LISTENER patches", len(lps))
	}
	var lpatch listenerv3.Listener
	if decodeProto(t, "LISTENER", lps[0].Patch.Value, &lpatch) {
		l := &listenerv3.Listener{Name: "0.0.0.0_8080", Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}}
		proto.Merge(l, &lpatch)
		if err := l.ValidateAll(); err != nil {
			t.Error(err)
		}
		if l.GetPerConnectionBufferLimitBytes().GetValue() < 1<<20 {
			t.Errorf("per_connection_buffer_limit_bytes %v: prompts are buffered whole", l.GetPerConnectionBufferLimitBytes())
		}
	}
}

// domainsOf maps each ratelimit filter's stage to its domain.
func domainsOf(t *testing.T, is *istio) map[uint32]string {
	t.Helper()
	out := map[uint32]string{}
	for _, f := range httpFilters(t, is) {
		var rl ratelimitv3.RateLimit
		if f.GetTypedConfig().UnmarshalTo(&rl) == nil {
			out[rl.GetStage()] = rl.GetDomain()
		}
	}
	if len(out) == 0 {
		t.Fatal("no ratelimit filter")
	}
	return out
}

// checkRateLimitActions builds the descriptor each rate limit produces,
// with a sample header value, and checks that the domain of the filter
// of its stage limits it; a stream-done charge must be charged always.
func checkRateLimitActions(t *testing.T, rls []*routev3.RateLimit, s *policy.Snapshot, domains map[uint32]string) {
	t.Helper()
	if len(rls) == 0 {
		t.Error("no rate_limits")
	}
	for i, rl := range rls {
		var entries []policy.Entry
		for _, a := range rl.GetActions() {
			switch {
			case a.GetGenericKey() != nil:
				k := a.GetGenericKey().GetDescriptorKey()
				if k == "" {
					k = "generic_key"
				}
				entries = append(entries, policy.Entry{Key: k, Value: a.GetGenericKey().GetDescriptorValue()})
			case a.GetRequestHeaders() != nil:
				entries = append(entries, policy.Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "sample-key"})
			case a.GetRemoteAddress() != nil:
				entries = append(entries, policy.Entry{Key: "remote_address", Value: "203.0.113.7"})
			default:
				t.Errorf("rate_limits[%d]: action %v not understood by this test", i, a)
			}
		}
		domain, ok := domains[rl.GetStage().GetValue()]
		if !ok {
			t.Errorf("rate_limits[%d]: no ratelimit filter of stage %d", i, rl.GetStage().GetValue())
			continue
		}
		m := s.Match(domain, entries)
		switch {
		case m == nil:
			t.Errorf("rate_limits[%d] produces %v, which domain %q does not limit", i, entries, domain)
		case rl.GetApplyOnStreamDone() && (m.Rule == nil || !m.Rule.AlwaysCharge):
			t.Errorf("rate_limits[%d]: stream-done charge %v of domain %q is not charged always", i, entries, domain)
		}
	}
}
