package envoyapi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// listenerHCM decodes the listener's connection manager.
func listenerHCM(t *testing.T, b *bootstrapv3.Bootstrap) *hcmv3.HttpConnectionManager {
	t.Helper()
	var hcm hcmv3.HttpConnectionManager
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	return &hcm
}

// virtualHost decodes the listener's virtual host.
func virtualHost(t *testing.T, b *bootstrapv3.Bootstrap) *routev3.VirtualHost {
	t.Helper()
	js, err := protojson.Marshal(listenerHCM(t, b))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		RouteConfig json.RawMessage `json:"routeConfig"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	var rc routev3.RouteConfiguration
	if err := protojson.Unmarshal(doc.RouteConfig, &rc); err != nil {
		t.Fatal(err)
	}
	return rc.GetVirtualHosts()[0]
}

// TestEnvoyYAMLTokenCharge: the downstream ext_proc receives its
// namespace's dynamic metadata, and a stream-done rate limit charges
// total_tokens from it to a descriptor that config/llm.yaml charges
// always, through a rate limit filter of the same stage.
func TestEnvoyYAMLTokenCharge(t *testing.T) {
	b := loadBootstrap(t)
	hcm := listenerHCM(t, b)
	down := extProcOf(t, hcm.GetHttpFilters()[0].GetTypedConfig())
	if ns := down.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(); len(ns) != 1 || ns[0] != "envoy.filters.http.ext_proc" {
		t.Errorf("downstream ext_proc receives %v: the token counts would be dropped", ns)
	}
	domains := map[uint32]string{}
	for _, f := range hcm.GetHttpFilters() {
		var rl rlfilterv3.RateLimit
		if f.GetTypedConfig().UnmarshalTo(&rl) == nil {
			domains[rl.GetStage()] = rl.GetDomain()
		}
	}
	llm, err := os.ReadFile(filepath.Join("..", "..", "config", "llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	snap := policy.Compile(policy.File{Name: "llm.yaml", Data: llm})
	found := false
	for _, rl := range virtualHost(t, b).GetRateLimits() {
		if !rl.GetApplyOnStreamDone() {
			continue
		}
		found = true
		if f := rl.GetHitsAddend().GetFormat(); f != "%DYNAMIC_METADATA(envoy.filters.http.ext_proc:total_tokens)%" {
			t.Errorf("stream-done hits_addend %q", f)
		}
		domain, ok := domains[rl.GetStage().GetValue()]
		if !ok {
			t.Fatalf("no rate limit filter of stage %d", rl.GetStage().GetValue())
		}
		var entries []policy.Entry
		for _, a := range rl.GetActions() {
			switch {
			case a.GetRequestHeaders() != nil:
				entries = append(entries, policy.Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "gpt-4o"})
			case a.GetGenericKey() != nil:
				entries = append(entries, policy.Entry{Key: a.GetGenericKey().GetDescriptorKey(), Value: a.GetGenericKey().GetDescriptorValue()})
			}
		}
		if m := snap.Match(domain, entries); m == nil || m.Rule == nil || !m.Rule.AlwaysCharge {
			t.Errorf("domain %s, descriptor %v: limit %+v, want one that charges always", domain, entries, m)
		}
	}
	if !found {
		t.Error("no apply_on_stream_done rate limit")
	}
}
