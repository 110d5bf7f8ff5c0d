package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser: it must never panic, and
// whatever it builds must be consistent.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "testdata/*/*.yaml", "../../config/*.yaml"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if data, err := os.ReadFile(p); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(matchYAML))
	f.Add([]byte("a: &a [*a, *a]\nb: *a\n"))
	f.Add([]byte("domain: x\ndescriptors:\n  - &d {key: k, descriptors: [*d]}\n"))
	f.Add([]byte("<<: {domain: m}\ndescriptors: [{key: a, value: '**a*', rate_limit: {unit: day, requests_per_unit: 1}}]"))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := Compile(File{Name: "fuzz.yaml", Data: data})
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("json: %v", err)
		}
		for _, p := range s.Problems() {
			if p.File == "" || p.Message == "" || (p.Severity != Warning && p.Severity != Error) {
				t.Fatalf("malformed problem %+v", p)
			}
		}
		for _, d := range s.Domains() {
			checkTree(t, s.Domain(d))
		}
		for _, tg := range s.Targets() {
			if len(tg.Fallbacks) > maxFallbacks || s.Target(tg.Name) != tg {
				t.Fatalf("target %+v", tg)
			}
		}
	})
}

// checkTree asserts that every child is found by its own key and value
// (exact children) and that every compiled limit carries a valid rule.
func checkTree(t *testing.T, n *Node) {
	for _, c := range n.Children() {
		if !c.Wildcard() && n.Child(c.Key(), c.Value()) != c {
			t.Fatalf("child %s not found by its own value", c.Path())
		}
		if l := c.Limit(); l != nil && !l.Unlimited {
			if l.Rule == nil || l.Rule.Validate() != nil || l.Fingerprint != l.Rule.Fingerprint() {
				t.Fatalf("limit %+v", l)
			}
		}
		checkTree(t, c)
	}
}
