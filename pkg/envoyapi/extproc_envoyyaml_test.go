package envoyapi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-svc/ratelimit-svc/internal/envoyconf"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"

	// The typed_config types envoy.yaml uses, so their Any values resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// loadBootstrap decodes envoy.yaml the way Envoy does: YAML (anchors
// resolved) to JSON to the Bootstrap proto, every typed_config resolved
// through the global registry.
func loadBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "envoy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("envoy.yaml as JSON: %v", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("envoy.yaml as Bootstrap: %v", err)
	}
	return &b
}

// validateTree reports every validation problem of m and the messages
// inside it, Any values unpacked.
func validateTree(t *testing.T, m protoreflect.Message, where string) {
	t.Helper()
	for _, err := range envoyconf.Validate(m, where) {
		t.Error(err)
	}
}

func TestEnvoyYAMLValidates(t *testing.T) {
	b := loadBootstrap(t)
	if err := b.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	validateTree(t, b.ProtoReflect(), "bootstrap")
}

// TestEnvoyYAMLShape checks the wiring the service relies on.
func TestEnvoyYAMLShape(t *testing.T) {
	b := loadBootstrap(t)
	clusters := map[string]bool{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = true
		opts := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
		if opts == nil {
			continue
		}
		var po upstreamhttpv3.HttpProtocolOptions
		if err := opts.UnmarshalTo(&po); err != nil {
			t.Fatal(err)
		}
		fs := po.GetHttpFilters()
		if c.GetName() == "ratelimit" {
			if po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
				t.Error("ratelimit cluster is not HTTP/2")
			}
			continue
		}
		if len(fs) < 2 || fs[len(fs)-1].GetName() != "envoy.filters.http.upstream_codec" {
			t.Errorf("cluster %s: upstream filters %v, want ext_proc … upstream_codec", c.GetName(), fs)
			continue
		}
		ep := extProcOf(t, fs[0].GetTypedConfig())
		if role(ep) != "upstream" || !ep.GetAllowModeOverride() {
			t.Errorf("cluster %s: upstream ext_proc role %q", c.GetName(), role(ep))
		}
		if m := ep.GetProcessingMode().GetRequestBodyMode(); m != extprocfilterv3.ProcessingMode_BUFFERED {
			t.Errorf("cluster %s: upstream ext_proc request body %v: a retry cannot move to another model", c.GetName(), m)
		}
	}
	down := extProcOf(t, listenerHCM(t, b).GetHttpFilters()[0].GetTypedConfig())
	if role(down) != "downstream" || down.GetProcessingMode().GetResponseBodyMode() != extprocfilterv3.ProcessingMode_STREAMED {
		t.Errorf("downstream ext_proc role %q, response body %v: the slot would go back at the first byte",
			role(down), down.GetProcessingMode().GetResponseBodyMode())
	}
	for _, name := range []string{"ratelimit", "openai", "anthropic", "mock-llm"} {
		if !clusters[name] {
			t.Errorf("cluster %s missing", name)
		}
	}
}

func extProcOf(t *testing.T, a *anypb.Any) *extprocfilterv3.ExternalProcessor {
	t.Helper()
	var ep extprocfilterv3.ExternalProcessor
	if err := a.UnmarshalTo(&ep); err != nil {
		t.Fatal(err)
	}
	return &ep
}

func role(ep *extprocfilterv3.ExternalProcessor) string {
	for _, h := range ep.GetGrpcService().GetInitialMetadata() {
		if h.GetKey() == "x-resil-role" {
			return h.GetValue()
		}
	}
	return ""
}

// routes decodes the listener's routes.
func routes(t *testing.T, b *bootstrapv3.Bootstrap) []*routev3.Route {
	t.Helper()
	return virtualHost(t, b).GetRoutes()
}

// TestEnvoyYAMLRetryPolicy checks that every route's retry policy reads the
// headers the upstream role writes, and honours a reset header as long as
// the longest hint a profile waits for.
func TestEnvoyYAMLRetryPolicy(t *testing.T) {
	longest := max(resilience.Standard().MaxHintWait, resilience.Interactive().MaxHintWait)
	for _, r := range routes(t, loadBootstrap(t)) {
		rp := r.GetRoute().GetRetryPolicy()
		if rp == nil {
			t.Errorf("route %s has no retry policy", r.GetName())
			continue
		}
		rl := rp.GetRateLimitedRetryBackOff()
		ok := len(rp.GetRetriableHeaders()) > 0 && rp.GetRetriableHeaders()[0].GetName() == "x-resil-retry" &&
			len(rl.GetResetHeaders()) > 0 && rl.GetResetHeaders()[0].GetName() == "x-resil-retry-after" &&
			rl.GetResetHeaders()[0].GetFormat() == routev3.RetryPolicy_SECONDS
		if !ok {
			t.Errorf("route %s: retry policy %v does not read x-resil-retry and x-resil-retry-after", r.GetName(), rp)
		}
		if got := rl.GetMaxInterval().AsDuration(); got < longest {
			t.Errorf("route %s: rate_limited_retry_back_off.max_interval %v: Envoy would ignore hints up to %v", r.GetName(), got, longest)
		}
	}
}
