package policy

import (
	"slices"
	"testing"
)

const matchYAML = `
domain: test
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key3
  - key: path
    value: "/api/*"
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: path
    value: "/api/v1/*"
    rate_limit: {unit: second, requests_per_unit: 200}
  - key: path
    value: "/static"
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: host
    value: "*.example.com"
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: host
    value: "api-*-eu-*.internal"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: host
    value: "a*b*c"
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: user
    value: "*"
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: tenant
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 8}
  - key: nested
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: inner
        value: x
        rate_limit: {unit: hour, requests_per_unit: 11}
  - key: unl
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: read
    rate_limit: {name: reads, unit: second, requests_per_unit: 50}
  - key: hot_read
    rate_limit:
      name: hot
      unit: second
      requests_per_unit: 500
      replaces: [{name: reads}, {name: writes}]
  - key: week
    rate_limit: {unit: week, requests_per_unit: 9, unit_multiplier: 2}
`

func mustCompile(t testing.TB, yaml string) *Snapshot {
	t.Helper()
	s := Compile(File{Name: "test.yaml", Data: []byte(yaml)})
	for _, p := range s.Problems() {
		t.Errorf("unexpected problem: %s", p)
	}
	return s
}

func e(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestMatch(t *testing.T) {
	s := mustCompile(t, matchYAML)
	tests := []struct {
		name    string
		domain  string
		entries []Entry
		want    string // the matched limit's Path; "" for none
	}{
		{"exact beats key-only", "test", e("key2", "value2"), "test.key2_value2"},
		{"key-only takes any other value", "test", e("key2", "other"), "test.key2"},
		{"key-only takes the empty value", "test", e("key2", ""), "test.key2"},
		{"nested exact then key-only", "test", e("key1", "value1", "subkey1", "x"), "test.key1_value1.subkey1"},
		{"request shallower than config", "test", e("key1", "value1"), ""},
		{"request deeper than config", "test", e("key1", "value1", "subkey1", "x", "more", "y"), ""},
		{"deeper than a leaf limit", "test", e("key2", "value2", "sub", "y"), ""},
		{"nested value mismatch", "test", e("key1", "other", "subkey1", "x"), ""},
		{"node without limit", "test", e("key3", "a"), ""},
		{"unknown key", "test", e("nope", "a"), ""},
		{"unknown domain", "other", e("key2", "a"), ""},
		{"empty domain", "", e("key2", "a"), ""},
		{"no entries", "test", nil, ""},
		{"prefix glob", "test", e("path", "/api/users"), "test.path_/api/*"},
		{"prefix glob, empty rest", "test", e("path", "/api/"), "test.path_/api/*"},
		{"globs in file order", "test", e("path", "/api/v1/x"), "test.path_/api/*"},
		{"exact beats glob", "test", e("path", "/static"), "test.path_/static"},
		{"prefix glob miss", "test", e("path", "/apix"), ""},
		{"suffix glob", "test", e("host", "a.example.com"), "test.host_*.example.com"},
		{"suffix glob needs its dot", "test", e("host", "example.com"), ""},
		{"several stars", "test", e("host", "api-1-eu-west.internal"), "test.host_api-*-eu-*.internal"},
		{"several stars miss", "test", e("host", "api-1-us-west.internal"), ""},
		{"stars may match nothing", "test", e("host", "abc"), "test.host_a*b*c"},
		{"overlapping literals", "test", e("host", "ab"), ""},
		{"star matches all", "test", e("user", "bob"), "test.user_*"},
		{"star matches empty", "test", e("user", ""), "test.user_*"},
		{"mid-level limit", "test", e("nested", "a"), "test.nested"},
		{"below a mid-level limit", "test", e("nested", "a", "inner", "x"), "test.nested.inner_x"},
		{"below a mid-level limit, no child", "test", e("nested", "a", "inner", "y"), ""},
		{"multiplier", "test", e("week", "w"), "test.week"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Match(tc.domain, tc.entries)
			if (got == nil) != (tc.want == "") || (got != nil && got.Path != tc.want) {
				t.Fatalf("Match = %v, want %q", got, tc.want)
			}
		})
	}
}

func TestMatchLimitFields(t *testing.T) {
	s := mustCompile(t, matchYAML)
	l := s.Match("test", e("key2", "value2"))
	if l.Unit != Minute || l.RequestsPerUnit != 30 || l.UnitMultiplier != 1 || l.Rule == nil ||
		l.Fingerprint != l.Rule.Fingerprint() || l.Rule.Windows[0].Period != UnitPeriod(Minute) {
		t.Errorf("key2_value2 limit = %+v", l)
	}
	if l := s.Match("test", e("unl", "x")); !l.Unlimited || l.Rule != nil || l.Fingerprint != "" {
		t.Errorf("unlimited limit = %+v", l)
	}
	if l := s.Match("test", e("shadow", "x")); !l.ShadowMode || !l.DetailedMetric {
		t.Errorf("shadow limit = %+v", l)
	}
	if l := s.Match("test", e("key2", "x")); l.ShadowMode || l.DetailedMetric {
		t.Errorf("plain limit = %+v", l)
	}
	if l := s.Match("test", e("hot_read", "x")); l.Name != "hot" || !slices.Equal(l.Replaces, []string{"reads", "writes"}) {
		t.Errorf("replacing limit = %+v", l)
	}
	if l := s.Match("test", e("read", "x")); l.Name != "reads" || l.Replaces != nil {
		t.Errorf("replaced limit = %+v", l)
	}
	if l := s.Match("test", e("week", "x")); l.Unit != Week || l.UnitMultiplier != 2 ||
		l.Rule.Windows[0].Period != 14*UnitPeriod(Day) {
		t.Errorf("week limit = %+v", l)
	}
}

func TestNodeStepAPI(t *testing.T) {
	s := mustCompile(t, matchYAML)
	root := s.Domain("test")
	if root == nil || s.Domain("nope") != nil {
		t.Fatal("Domain lookup")
	}
	tests := []struct {
		key, value, counter  string
		keyOnly, wild, share bool
	}{
		{"user", "bob", "*", false, true, true},          // glob, shared
		{"tenant", "acme", "", true, false, true},        // key-only, shared
		{"path", "/api/x", "/api/x", false, true, false}, // glob, own counter
		{"key2", "zzz", "zzz", true, false, false},       // key-only, own counter
		{"key2", "value2", "value2", false, false, false},
	}
	for _, tc := range tests {
		n := root.Child(tc.key, tc.value)
		if n == nil {
			t.Fatalf("Child(%s, %s) = nil", tc.key, tc.value)
		}
		if n.Key() != tc.key || n.KeyOnly() != tc.keyOnly || n.Wildcard() != tc.wild ||
			n.ShareThreshold() != tc.share || n.CounterValue(tc.value) != tc.counter || n.Limit() == nil {
			t.Errorf("Child(%s, %s): keyOnly=%v wild=%v share=%v counter=%q", tc.key, tc.value,
				n.KeyOnly(), n.Wildcard(), n.ShareThreshold(), n.CounterValue(tc.value))
		}
	}
	var nilNode *Node
	if nilNode.Child("a", "b") != nil || nilNode.Limit() != nil || nilNode.Path() != "" {
		t.Error("nil node must behave as empty")
	}
	var nilSnap *Snapshot
	if nilSnap.Match("test", e("key2", "a")) != nil || nilSnap.Target("x") != nil {
		t.Error("nil snapshot must behave as empty")
	}
}

func TestMatchPath(t *testing.T) {
	s := mustCompile(t, matchYAML)
	buf := make([]*Node, 0, 4)
	nodes, l := s.MatchPath("test", e("key1", "value1", "subkey1", "x"), buf)
	if l == nil || len(nodes) != 2 || nodes[0].Value() != "value1" || nodes[1].Key() != "subkey1" {
		t.Fatalf("MatchPath = %v, %v", nodes, l)
	}
	if nodes, l := s.MatchPath("test", e("key1", "value1"), buf[:0]); l != nil || len(nodes) != 1 {
		t.Fatalf("shallow MatchPath = %v, %v", nodes, l)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	s := mustCompile(t, matchYAML)
	reqs := [][]Entry{
		e("key1", "value1", "subkey1", "some-long-value-that-would-not-fit-a-stack-buffer-for-concatenation"),
		e("host", "api-1-eu-west.internal"),
		e("path", "/api/v1/users/12345"),
		e("nope", "x"),
	}
	buf := make([]*Node, 0, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		for _, r := range reqs {
			s.Match("test", r)
			s.MatchPath("test", r, buf[:0])
			s.Domain("test").Child(r[0].Key, r[0].Value).CounterValue(r[0].Value)
		}
	})
	if allocs != 0 {
		t.Fatalf("matching allocates %v times per run", allocs)
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"**", "x", true},
		{"foo*", "foo", true},
		{"foo*", "foobar", true},
		{"foo*", "fo", false},
		{"*bar", "bar", true},
		{"*bar", "foobar", true},
		{"*bar", "barx", false},
		{"f*r", "fr", true},
		{"f*r", "foobar", true},
		{"f*r", "foobaz", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"a*ab", "ab", false}, // prefix and suffix must not overlap
		{"a*ab", "aab", true}, // …but may touch
		{"*aa*aa*", "aaa", false},
		{"*aa*aa*", "aaaa", true},
		{"x*b*b*y", "xbby", true},
		{"x*b*b*y", "xby", false},
	}
	for _, tc := range tests {
		g := compileGlob(tc.pattern)
		if got := g.match(tc.s); got != tc.want {
			t.Errorf("glob %q match %q = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	s := Compile(File{Name: "bench.yaml", Data: []byte(matchYAML)})
	req := e("key1", "value1", "subkey1", "abc")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s.Match("test", req) == nil {
				b.Fatal("no match")
			}
		}
	})
}
