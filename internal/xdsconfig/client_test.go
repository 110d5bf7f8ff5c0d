package xdsconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratelimit-svc/ratelimit-svc/internal/xdsconfig/xdstest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// The first set every test serves, and the files it stands for.

func apiConfig(perKey uint32) *rlsconf.RateLimitConfig {
	perKeyLimit := limit(perKey, rlsconf.RateLimitUnit_MINUTE)
	perKeyLimit.Name = "per_key"
	shadow := desc("remote_address", "", limit(10, rlsconf.RateLimitUnit_SECOND))
	shadow.ShadowMode = true
	return config("api-config", "api",
		desc("generic_key", "api", nil,
			desc("api_key", "", perKeyLimit),
			desc("api_key", "premium-*", limit(600, rlsconf.RateLimitUnit_MINUTE))),
		shadow,
		desc("remote_address", "10.0.0.1", &rlsconf.RateLimitPolicy{Unlimited: true}))
}

func llmConfig() *rlsconf.RateLimitConfig {
	named := limit(100, rlsconf.RateLimitUnit_HOUR)
	named.Name = "gpt4o"
	exact := desc("model", "gpt-4o", named)
	exact.DetailedMetric = true
	daily := limit(1000, rlsconf.RateLimitUnit_DAY)
	daily.Replaces = []*rlsconf.RateLimitReplace{{Name: "gpt4o"}}
	return config("llm-config", "llm", exact, desc("model", "", daily))
}

const apiFile = `domain: api
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: api_key
        rate_limit: {name: per_key, unit: minute, requests_per_unit: 60}
      - key: api_key
        value: premium-*
        rate_limit: {unit: minute, requests_per_unit: 600}
  - key: remote_address
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 10.0.0.1
    rate_limit: {unlimited: true}
`

const llmFile = `domain: llm
descriptors:
  - key: model
    value: gpt-4o
    detailed_metric: true
    rate_limit: {name: gpt4o, unit: hour, requests_per_unit: 100}
  - key: model
    rate_limit: {unit: day, requests_per_unit: 1000, replaces: [{name: gpt4o}]}
`

// domainsJSON is the "domains" part of a snapshot's /debug/config form.
func domainsJSON(t *testing.T, s *policy.Snapshot) any {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Domains any }
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v.Domains
}

func entries(kv ...string) []policy.Entry {
	var out []policy.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, policy.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// serve starts a server holding the first set (v1) and a client that
// applied it.
func serve(t *testing.T) (*xdstest.PKI, *xdstest.Server, *running) {
	t.Helper()
	p := xdstest.NewPKI(t)
	s := xdstest.Start(t, p, "127.0.0.1:0")
	s.Set(t, testNode, "v1", apiConfig(60), llmConfig())
	c := startClient(t, clientOptions(t, p, s))
	select {
	case <-c.Ready():
	case <-time.After(5 * time.Second):
		t.Fatalf("no config applied; status %+v", c.Status())
	}
	return p, s, c
}

func TestInitialConfigBuildsTheFileSnapshot(t *testing.T) {
	_, s, c := serve(t)
	snap := c.Current()
	if got := snap.Domains(); !reflect.DeepEqual(got, []string{"api", "llm"}) {
		t.Fatalf("domains %v", got)
	}
	for _, p := range snap.Problems() {
		t.Errorf("problem: %s %s", p.Severity, p)
	}
	if l := snap.Match("api", entries("generic_key", "api", "api_key", "k1")); l == nil || l.Name != "per_key" ||
		l.RequestsPerUnit != 60 || l.Unit != policy.Minute {
		t.Errorf("per-key limit %+v", l)
	}
	if l := snap.Match("api", entries("remote_address", "203.0.113.9")); l == nil || !l.ShadowMode {
		t.Errorf("shadow limit %+v", l)
	}

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(apiFile), 0o600)
	os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(llmFile), 0o600)
	files, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := domainsJSON(t, snap), domainsJSON(t, files); !reflect.DeepEqual(got, want) {
		gj, _ := json.MarshalIndent(got, "", " ")
		wj, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("xDS domains differ from the files'\nxDS:   %s\nfiles: %s", gj, wj)
	}

	st := c.Status()
	if st.Type != SourceType || st.ServerURL != s.Addr || st.NodeID != testNode || !st.TLS || !st.Connected ||
		st.VersionInfo != "v1" || !reflect.DeepEqual(st.Resources, []string{"api-config", "llm-config"}) {
		t.Errorf("status %+v", st)
	}
	first := s.Requests()[0]
	md := first.GetNode().GetMetadata().GetFields()
	if first.GetNode().GetId() != testNode || md["cluster"].GetStringValue() != "edge" || md["zone"].GetStringValue() != "a" ||
		first.GetTypeUrl() != TypeURL || first.GetVersionInfo() != "" || len(first.GetResourceNames()) != 0 {
		t.Errorf("first request %v", first)
	}
	nonce := s.Nonce("v1")
	find(t, s, "the ACK of v1", func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "v1" && r.GetResponseNonce() == nonce && r.GetErrorDetail() == nil
	})
	if got := s.Metadata().Get("x-tenant"); !reflect.DeepEqual(got, []string{"t1"}) {
		t.Errorf("header x-tenant %v", got)
	}
}

func TestUpdateAppliedWithinASecond(t *testing.T) {
	_, s, c := serve(t)
	start := time.Now()
	s.Set(t, testNode, "v2", apiConfig(120), llmConfig())
	u := c.next(t, "v2")
	if took := time.Since(start); took > time.Second {
		t.Errorf("update took %v", took)
	}
	if !u.Applied || !u.Changed || u.Err != nil || u.Snapshot != c.Current() {
		t.Errorf("update %+v", u)
	}
	if l := c.Current().Match("api", entries("generic_key", "api", "api_key", "k1")); l == nil || l.RequestsPerUnit != 120 {
		t.Errorf("per-key limit after the update %+v", l)
	}
	if st := c.Status(); st.VersionInfo != "v2" {
		t.Errorf("status version %q", st.VersionInfo)
	}
}

func TestRemovedDomainDisappears(t *testing.T) {
	_, s, c := serve(t)
	s.Set(t, testNode, "v2", apiConfig(60))
	if u := c.next(t, "v2"); !u.Applied {
		t.Fatalf("update %+v", u)
	}
	if got := c.Current().Domains(); !reflect.DeepEqual(got, []string{"api"}) {
		t.Errorf("domains %v", got)
	}
	if c.Current().Domain("llm") != nil {
		t.Error("domain llm is still there")
	}
	if st := c.Status(); !reflect.DeepEqual(st.Resources, []string{"api-config"}) {
		t.Errorf("resources %v", st.Resources)
	}
}

func TestBadResourceIsNACKedAndTheLastGoodSetKept(t *testing.T) {
	_, s, c := serve(t)
	good := c.Current()
	bad := config("bad-config", "bad", desc("k", "v", limit(5, rlsconf.RateLimitUnit_UNKNOWN)))
	s.Set(t, testNode, "v2", apiConfig(120), bad) // llm dropped, api changed: none of it may apply

	u := c.next(t, "v2")
	var rej *RejectedError
	if u.Applied || u.Changed || !errors.As(u.Err, &rej) || u.Snapshot != good {
		t.Fatalf("update %+v", u)
	}
	nonce := s.Nonce("v2")
	nack := find(t, s, "the NACK of v2", func(r *discovery.DiscoveryRequest) bool {
		return r.GetResponseNonce() == nonce && r.GetErrorDetail() != nil
	})
	msg := nack.GetErrorDetail().GetMessage()
	if nack.GetVersionInfo() != "v1" || !strings.Contains(msg, "bad-config:descriptors[0].rate_limit") ||
		!strings.Contains(msg, "unknown unit") {
		t.Errorf("NACK version %q, detail %q", nack.GetVersionInfo(), msg)
	}
	// The cache resends v2 after each NACK; the client paces those NACKs
	// and reports v2 once.
	time.Sleep(300 * time.Millisecond)
	nacks := 0
	for _, r := range s.Requests() {
		if r.GetErrorDetail() != nil {
			nacks++
		}
	}
	if nacks > 5 {
		t.Errorf("%d NACKs in 300 ms", nacks)
	}
	if len(c.updates) > 0 {
		t.Errorf("more updates: %+v", <-c.updates)
	}
	if c.Current() != good || c.Current().Domain("llm") == nil || c.Current().Domain("bad") != nil {
		t.Errorf("the last good set was not kept: domains %v", c.Current().Domains())
	}
	st := c.Status()
	if st.VersionInfo != "v1" || st.Rejected == nil || st.Rejected.VersionInfo != "v2" || st.Rejected.Error != msg {
		t.Errorf("status %+v, rejected %+v", st, st.Rejected)
	}

	s.Set(t, testNode, "v3", apiConfig(120))
	if u := c.next(t, "v3"); !u.Applied {
		t.Fatalf("update after the fix %+v", u)
	}
	if st := c.Status(); st.VersionInfo != "v3" || st.Rejected != nil {
		t.Errorf("status after the fix %+v", st)
	}
}

func TestWarningsAreACKed(t *testing.T) {
	warned := config("warned", "warned", desc("k", "", &rlsconf.RateLimitPolicy{Unlimited: true,
		Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 5}))
	data, _ := toYAML(warned)
	ps := policy.Compile(policy.File{Name: "warned", Data: data}).Problems()
	if len(ps) == 0 || policy.HasErrors(ps) {
		t.Skipf("the loader no longer only warns on a unit with unlimited: %v", ps)
	}
	_, s, c := serve(t)
	s.Set(t, testNode, "v2", apiConfig(60), warned)
	u := c.next(t, "v2")
	if !u.Applied || len(u.Problems) == 0 || c.Current().Domain("warned") == nil {
		t.Fatalf("update %+v", u)
	}
	nonce := s.Nonce("v2")
	find(t, s, "the ACK of v2", func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "v2" && r.GetResponseNonce() == nonce && r.GetErrorDetail() == nil
	})
}

func TestReconnectsToARestartedServer(t *testing.T) {
	p, s, c := serve(t)
	s.Stop()
	eventually(t, 5*time.Second, "the client to see the stream end", func() bool { return !c.Status().Connected })

	s2 := xdstest.Start(t, p, s.Addr)
	s2.Set(t, testNode, "w1", config("new-config", "new", desc("k", "", limit(7, rlsconf.RateLimitUnit_SECOND))))
	u := c.next(t, "w1")
	if !u.Applied {
		t.Fatalf("update %+v", u)
	}
	if got := c.Current().Domains(); !reflect.DeepEqual(got, []string{"new"}) {
		t.Errorf("domains %v", got)
	}
	st := c.Status()
	if st.Reconnects < 1 || !st.Connected || st.VersionInfo != "w1" {
		t.Errorf("status %+v", st)
	}
	if first := s2.Requests()[0]; first.GetVersionInfo() != "v1" || first.GetNode().GetId() != testNode {
		t.Errorf("first request to the new server %v", first)
	}
}

func TestRefusesAnUntrustedServer(t *testing.T) {
	p := xdstest.NewPKI(t)
	s := xdstest.Start(t, p, "127.0.0.1:0")
	s.Set(t, testNode, "v1", apiConfig(60))
	tests := []struct {
		name    string
		change  func(*Options)
		wantErr string
	}{
		{"wrong CA", func(o *Options) { o.CACert = p.OtherCAFile }, "certificate signed by unknown authority"},
		{"wrong SAN", func(o *Options) { o.ServerSAN = "other.test" }, "not other.test"},
		{"system roots", func(o *Options) { o.CACert = "" }, "certificate signed by unknown authority"},
		{"no client certificate", func(o *Options) { o.ClientCert, o.ClientKey = "", "" }, "certificate required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := clientOptions(t, p, s)
			tt.change(&o)
			c := startClient(t, o)
			eventually(t, 5*time.Second, "a failed attempt", func() bool {
				st := c.Status()
				return st.Reconnects >= 2 && strings.Contains(st.LastError, tt.wantErr)
			})
			if c.HasConfig() || c.Status().Connected {
				t.Errorf("connected: %+v", c.Status())
			}
		})
	}
	if n := s.Opened(); n != 0 {
		t.Errorf("%d streams reached the server", n)
	}
}

func TestMaxRecvMsgSize(t *testing.T) {
	p := xdstest.NewPKI(t)
	s := xdstest.Start(t, p, "127.0.0.1:0")
	s.Set(t, testNode, "v1", apiConfig(60), llmConfig())
	o := clientOptions(t, p, s)
	o.MaxRecvMsgSize = 64
	c := startClient(t, o)
	eventually(t, 5*time.Second, "a refused response", func() bool {
		return strings.Contains(c.Status().LastError, "larger than max")
	})
	if c.HasConfig() {
		t.Error("a response over MaxRecvMsgSize was applied")
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	_, _, c := serve(t)
	// startClient's cleanup cancels the context and fails the test if Run
	// does not return nil within 5 s; here Run must also refuse a second
	// concurrent call.
	if err := c.Run(t.Context()); err == nil {
		t.Error("a second Run was accepted")
	}
}
