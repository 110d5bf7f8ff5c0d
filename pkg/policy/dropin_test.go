package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const quotaPolicy = `
domain: ai
descriptors:
  - key: backend
    value: a
    quota_mode: true
    value_to_metric: true
    metadata:
      route: {tier: pt, weight: 3, ratio: 0.5, on: true, tags: [x, y], none: null}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: backend
    value: b
    rate_limit: {unit: minute, requests_per_unit: 10, quota_mode: true}
  - key: tenant
    metadata: {note: orphan}
  - key: bad
    metadata: [not, a, mapping]
    rate_limit: {unit: second, requests_per_unit: 1}
`

func problemsOf(s *Snapshot) string {
	var b strings.Builder
	for _, p := range s.Problems() {
		b.WriteString(p.Severity.String() + " " + p.String() + "\n")
	}
	return b.String()
}

func TestQuotaModeMetadataAndValueToMetric(t *testing.T) {
	s := Compile(File{Name: "ai.yaml", Data: []byte(quotaPolicy)})
	probs := problemsOf(s)
	a := s.Match("ai", e("backend", "a"))
	if a == nil || !a.QuotaMode {
		t.Fatalf("quota_mode on the descriptor: %+v\n%s", a, probs)
	}
	want := map[string]any{"route": map[string]any{
		"tier": "pt", "weight": int64(3), "ratio": 0.5, "on": true, "tags": []any{"x", "y"}, "none": nil}}
	if !reflect.DeepEqual(a.Metadata, want) {
		t.Errorf("metadata %#v", a.Metadata)
	}
	if !s.Domain("ai").Child("backend", "a").ValueToMetric() || s.Domain("ai").Child("backend", "b").ValueToMetric() {
		t.Error("value_to_metric belongs to the node that sets it")
	}
	if b := s.Match("ai", e("backend", "b")); b == nil || !b.QuotaMode {
		t.Errorf("quota_mode inside rate_limit is applied: %+v", b)
	}
	if !strings.Contains(probs, "warning ai.yaml:descriptors[1].rate_limit.quota_mode: quota_mode belongs on the descriptor") {
		t.Errorf("no warning for quota_mode inside rate_limit:\n%s", probs)
	}
	if !strings.Contains(probs, "warning ai.yaml:descriptors[2]: quota_mode and metadata apply to a descriptor's rate_limit") {
		t.Errorf("no warning for metadata without a rate_limit:\n%s", probs)
	}
	bad := s.Match("ai", e("bad", "x"))
	if bad == nil || bad.Metadata != nil || !strings.Contains(probs, "error ai.yaml:descriptors[3].metadata: want a mapping (metadata ignored)") {
		t.Errorf("malformed metadata is dropped alone: %+v\n%s", bad, probs)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Errorf("snapshot JSON: %v", err)
	}
}

func TestChargedRuleSharesTheLimits(t *testing.T) {
	s := Compile(File{Name: "ai.yaml", Data: []byte(quotaPolicy)})
	l := s.Match("ai", e("backend", "a"))
	if l.Rule.AlwaysCharge || !l.Charged.AlwaysCharge {
		t.Fatalf("Rule %+v, Charged %+v", l.Rule, l.Charged)
	}
	if !reflect.DeepEqual(l.Rule.Windows, l.Charged.Windows) || l.Rule.Algorithm != l.Charged.Algorithm {
		t.Errorf("Charged must enforce the same windows")
	}
	if ChargedRule(l.Charged) != l.Charged || ChargedRule(nil) != nil {
		t.Error("ChargedRule of an always-charging rule is the rule itself")
	}
}

const (
	domainA = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	domainB = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n" +
		"  - key: a\n    rate_limit: {unit: second, requests_per_unit: 9}\n"
)

func TestMergeDomains(t *testing.T) {
	files := []File{{Name: "1.yaml", Data: []byte(domainA)}, {Name: "2.yaml", Data: []byte(domainB)}}
	plain := Compile(files...)
	if plain.Match("d", e("b", "x")) != nil || !strings.Contains(problemsOf(plain), `error 2.yaml:domain: duplicate domain "d" (domain dropped)`) {
		t.Errorf("without merging, the later domain is dropped:\n%s", problemsOf(plain))
	}
	merged := CompileWith(LoadOptions{MergeDomains: true}, files...)
	if l := merged.Match("d", e("b", "x")); l == nil || l.RequestsPerUnit != 2 {
		t.Errorf("merged descriptor b: %+v", l)
	}
	if l := merged.Match("d", e("a", "x")); l == nil || l.RequestsPerUnit != 1 {
		t.Errorf("the first file's descriptor a wins: %+v", l)
	}
	if !strings.Contains(problemsOf(merged), "error 2.yaml:domain: descriptor d.a is already defined for the merged domain (descriptor dropped)") {
		t.Errorf("problems:\n%s", problemsOf(merged))
	}
	if plain.Match("d", e("a", "x")) == nil || len(plain.Domain("d").Children()) != 1 {
		t.Error("merging must not change the parsed trees another snapshot uses")
	}
	if merged.Version() == plain.Version() {
		t.Error("load options are part of the version")
	}
}

func TestShadowModeOption(t *testing.T) {
	s := CompileWith(LoadOptions{ShadowMode: true}, File{Name: "1.yaml", Data: []byte(domainA)})
	if !s.ShadowMode() || Compile().ShadowMode() || (*Snapshot)(nil).ShadowMode() {
		t.Fatal("ShadowMode reports the load option")
	}
	out, err := json.Marshal(s)
	if err != nil || !strings.Contains(string(out), `"options":{"shadow_mode":true}`) {
		t.Errorf("debug JSON shows the options: %s %v", out, err)
	}
}

func TestLoadWithAndWatcherApplyOptions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "1.yaml", domainA)
	writeFile(t, dir, "2.yaml", domainB)
	s, err := LoadWith(dir, LoadOptions{MergeDomains: true})
	if err != nil || s.Match("d", e("b", "x")) == nil {
		t.Fatalf("LoadWith: %v", err)
	}
	w, err := NewWatcher(dir, WatcherOptions{Load: LoadOptions{MergeDomains: true, ShadowMode: true}})
	if err != nil {
		t.Fatal(err)
	}
	if c := w.Current(); c.Match("d", e("b", "x")) == nil || !c.ShadowMode() {
		t.Error("the watcher's snapshots carry its load options")
	}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
