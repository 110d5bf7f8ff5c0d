package xdsconfig

import (
	"reflect"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

func TestTypeURLIsTheCachesRateLimitConfigType(t *testing.T) {
	if TypeURL != resource.RateLimitConfigType {
		t.Errorf("TypeURL %q, go-control-plane %q", TypeURL, resource.RateLimitConfigType)
	}
}

func TestToYAMLWritesTheFileItStandsFor(t *testing.T) {
	quota := desc("user", "true", limit(0, rlsconf.RateLimitUnit_WEEK))
	quota.QuotaMode, quota.ShadowMode, quota.DetailedMetric = true, true, true
	quota.Metadata = mustStruct(t, map[string]any{"<<": "x", "tier": "gold", "n": 3})
	unlimited := &rlsconf.RateLimitPolicy{Unlimited: true, Name: "free",
		Replaces: []*rlsconf.RateLimitReplace{{Name: "paid"}}}
	got, err := toYAML(config("name", "d: x", quota, desc("null", "*", unlimited,
		desc("k", "", limit(3, rlsconf.RateLimitUnit(99))))))
	if err != nil {
		t.Fatal(err)
	}
	want := `domain: 'd: x'
descriptors:
    - key: user
      value: "true"
      rate_limit:
        unit: week
        requests_per_unit: 0
      shadow_mode: true
      detailed_metric: true
      quota_mode: true
      metadata:
        "<<": x
        "n": 3
        "tier": gold
    - key: "null"
      value: '*'
      rate_limit:
        name: free
        unlimited: true
        replaces:
            - name: paid
      descriptors:
        - key: k
          rate_limit:
            unit: "99"
            requests_per_unit: 3
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The metadata reads back as it was, "<<" as a plain key.
	var doc struct {
		Descriptors []struct{ Metadata map[string]any }
	}
	if err := yaml.Unmarshal(got, &doc); err != nil {
		t.Fatal(err)
	}
	if m := doc.Descriptors[0].Metadata; !reflect.DeepEqual(m, map[string]any{"<<": "x", "tier": "gold", "n": 3}) {
		t.Errorf("metadata read back %v", m)
	}
}

// response wraps configs as a server sends them.
func response(t *testing.T, version string, cs ...*rlsconf.RateLimitConfig) *discovery.DiscoveryResponse {
	t.Helper()
	r := &discovery.DiscoveryResponse{TypeUrl: TypeURL, VersionInfo: version, Nonce: "n-" + version}
	for _, c := range cs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		r.Resources = append(r.Resources, a)
	}
	return r
}

func TestBuildRejectsWhatTheLoaderDrops(t *testing.T) {
	ok := config("ok", "ok", desc("k", "", limit(1, rlsconf.RateLimitUnit_SECOND)))
	tests := []struct {
		name string
		give *rlsconf.RateLimitConfig
		want string
	}{
		{"unset unit", config("c", "d", desc("k", "", limit(5, rlsconf.RateLimitUnit_UNKNOWN))),
			`c:descriptors[0].rate_limit.unit: unknown unit "unknown"`},
		{"empty key", config("c", "d", desc("", "v", limit(5, rlsconf.RateLimitUnit_SECOND))),
			"c:descriptors[0].key: key is required"},
		{"empty domain", config("c", "", desc("k", "", nil)), "c:domain: domain is required"},
		{"duplicate domain", config("z", "ok", desc("k", "", nil)), `z:domain: duplicate domain "ok"`},
		{"duplicate descriptor", config("c", "d", desc("k", "v", nil), desc("k", "v", nil)),
			"c:descriptors[1]: duplicate descriptor d.k_v"},
		{"self replace", config("c", "d", desc("k", "", &rlsconf.RateLimitPolicy{Name: "a", Unit: rlsconf.RateLimitUnit_SECOND,
			RequestsPerUnit: 1, Replaces: []*rlsconf.RateLimitReplace{{Name: "a"}}})), "a limit cannot replace itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, names, err := build(response(t, "v", ok, tt.give), policy.LoadOptions{})
			rej, isRej := err.(*RejectedError)
			if !isRej || names != nil || snap == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("build: %v (names %v)", err, names)
			}
			for _, p := range rej.Problems {
				if p.Severity != policy.Error {
					t.Errorf("a warning among the rejection's problems: %s", p)
				}
			}
		})
	}
}

func TestBuildRejectsUndecodableResponses(t *testing.T) {
	wrongType := response(t, "v")
	other, _ := anypb.New(durationpb.New(1))
	wrongType.Resources = append(wrongType.Resources, other)
	garbage := response(t, "v")
	garbage.Resources = append(garbage.Resources, &anypb.Any{TypeUrl: TypeURL, Value: []byte{0xff, 0xff}})
	otherURL := response(t, "v")
	otherURL.TypeUrl = resource.ClusterType
	for name, resp := range map[string]*discovery.DiscoveryResponse{
		"resource of another type": wrongType, "bad bytes": garbage, "response of another type": otherURL,
	} {
		if snap, _, err := build(resp, policy.LoadOptions{}); err == nil || snap != nil {
			t.Errorf("%s: snapshot %v, error %v", name, snap, err)
		}
	}
}

func TestBuildUnwrapsTTLResources(t *testing.T) {
	inner, _ := anypb.New(config("a", "a", desc("k", "", nil)))
	wrapped, _ := anypb.New(&discovery.Resource{Name: "a", Resource: inner, Ttl: durationpb.New(1)})
	heartbeat, _ := anypb.New(&discovery.Resource{Name: "b", Ttl: durationpb.New(1)})
	resp := &discovery.DiscoveryResponse{TypeUrl: TypeURL, Resources: []*anypb.Any{wrapped, heartbeat}}
	snap, names, err := build(resp, policy.LoadOptions{})
	if err != nil || !reflect.DeepEqual(names, []string{"a"}) || snap.Domain("a") == nil {
		t.Errorf("build: %v, names %v", err, names)
	}
}

func TestFileNamesAreUnique(t *testing.T) {
	_, names, err := build(response(t, "v", config("", "a"), config("x#2", "b"), config("x", "c"), config("x", "d")), policy.LoadOptions{})
	if err != nil || !reflect.DeepEqual(names, []string{"a", "x", "x#2", "x#3"}) {
		t.Errorf("names %v, error %v", names, err)
	}
}

// TestNACKsHoldTheLastGoodVersion drives handle directly: a first bad
// response is NACKed with no version, a good one ACKed, a bad one after
// it NACKed with the good version, and its identical resend (new nonce,
// resources reordered) NACKed again without a new Update.
func TestNACKsHoldTheLastGoodVersion(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := config("bad", "", nil)
	good := config("good", "good", desc("k", "", limit(1, rlsconf.RateLimitUnit_SECOND)))

	req, u, ok, _ := c.handle(response(t, "v1", bad))
	if !ok || u.Applied || req.GetErrorDetail() == nil || req.GetVersionInfo() != "" || req.GetResponseNonce() != "n-v1" || c.HasConfig() {
		t.Fatalf("first bad response: %v, %+v", req, u)
	}
	req, u, ok, _ = c.handle(response(t, "v2", good))
	if !ok || !u.Applied || req.GetErrorDetail() != nil || req.GetVersionInfo() != "v2" || !c.HasConfig() {
		t.Fatalf("good response: %v, %+v", req, u)
	}
	req, u, ok, _ = c.handle(response(t, "v3", good, bad))
	if !ok || u.Applied || req.GetVersionInfo() != "v2" || req.GetErrorDetail() == nil {
		t.Fatalf("bad response: %v, %+v", req, u)
	}
	resend := response(t, "v3", bad, good)
	resend.Nonce = "again"
	req2, _, ok, repeats := c.handle(resend)
	if ok || repeats != 1 || !proto.Equal(req2.GetErrorDetail(), req.GetErrorDetail()) || req2.GetResponseNonce() != "again" {
		t.Errorf("resend: %v, ok %v, repeats %d", req2, ok, repeats)
	}
	if _, _, _, repeats := c.handle(resend); repeats != 2 {
		t.Errorf("second resend: repeats %d", repeats)
	}
	if c.Current().Domain("good") == nil || c.Status().VersionInfo != "v2" {
		t.Errorf("current %v, status %+v", c.Current().Domains(), c.Status())
	}
}

// TestLoadOptionsApply: with MergeDomains two resources of one domain
// merge instead of the set being rejected, and ShadowMode reaches the
// snapshot, including the empty one held before the first set.
func TestLoadOptionsApply(t *testing.T) {
	a := config("a", "shared", desc("k", "a", limit(1, rlsconf.RateLimitUnit_SECOND)))
	b := config("b", "shared", desc("k", "b", limit(2, rlsconf.RateLimitUnit_SECOND)))
	plain, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, u, _, _ := plain.handle(response(t, "v1", a, b)); u.Applied {
		t.Fatalf("one domain in two resources applied without MergeDomains: %+v", u)
	}
	merging, err := New(Options{Load: policy.LoadOptions{MergeDomains: true, ShadowMode: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !merging.Current().ShadowMode() {
		t.Error("the empty snapshot lacks ShadowMode")
	}
	_, u, _, _ := merging.handle(response(t, "v1", a, b))
	snap := merging.Current()
	if !u.Applied || !snap.ShadowMode() || snap.Match("shared", entries("k", "a")) == nil ||
		snap.Match("shared", entries("k", "b")) == nil {
		t.Fatalf("merged set: %+v, shadow %v", u, snap.ShadowMode())
	}
}
