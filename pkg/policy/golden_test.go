package policy

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestGolden loads each fixture in testdata (a file, or a directory for
// cross-file cases) and compares its problems and what survived with the
// fixture's .golden file.
func TestGolden(t *testing.T) {
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".golden") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join("testdata", e.Name())
		t.Run(e.Name(), func(t *testing.T) {
			s, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			got := dump(s)
			golden := strings.TrimSuffix(path, filepath.Ext(path)) + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s mismatch\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}

// dump renders what a snapshot holds, in a stable text form.
func dump(s *Snapshot) string {
	var b strings.Builder
	b.WriteString("problems:\n")
	for _, p := range s.Problems() {
		fmt.Fprintf(&b, "  %s %s\n", p.Severity, p)
	}
	b.WriteString("domains:\n")
	for _, d := range s.Domains() {
		fmt.Fprintf(&b, "  %s\n", d)
		dumpNodes(&b, s.Domain(d).Children(), "    ")
	}
	b.WriteString("targets:\n")
	for _, t := range s.Targets() {
		fmt.Fprintf(&b, "  %s: cluster=%s model=%s provider=%q max_concurrent=%d\n",
			t.Name, t.Cluster, t.Model, t.Provider, t.MaxConcurrent)
		fmt.Fprintf(&b, "    rate=%s tokens=%s retry=%s fallbacks=%v\n",
			ruleText(t.RateLimit), ruleText(t.TokenLimit), retryText(t.Retry), t.Fallbacks)
	}
	return b.String()
}

func dumpNodes(b *strings.Builder, ns []*Node, indent string) {
	for _, n := range ns {
		name := n.Key()
		if !n.KeyOnly() {
			name += "=" + n.Value()
		}
		if n.ShareThreshold() {
			name += " (shared)"
		}
		fmt.Fprintf(b, "%s%s%s\n", indent, name, limitText(n.Limit()))
		dumpNodes(b, n.Children(), indent+"  ")
	}
}

func limitText(l *Limit) string {
	if l == nil {
		return ""
	}
	var parts []string
	if l.Unlimited {
		parts = append(parts, "unlimited")
	} else {
		parts = append(parts, fmt.Sprintf("%d/%d×%s", l.RequestsPerUnit, l.UnitMultiplier, l.Unit), ruleText(l.Rule))
	}
	if l.Name != "" {
		parts = append(parts, "name="+l.Name)
	}
	if len(l.Replaces) > 0 {
		parts = append(parts, "replaces="+strings.Join(l.Replaces, ","))
	}
	if l.ShadowMode {
		parts = append(parts, "shadow")
	}
	return ": " + strings.Join(parts, " ")
}

func ruleText(r *limiter.Rule) string {
	if r == nil {
		return "none"
	}
	s := r.Fingerprint()
	if t := r.Tuning; t != (limiter.Tuning{}) {
		s += fmt.Sprintf(" tuning=%+v", t)
	}
	return s
}

func retryText(r *RetryPolicy) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%d/%s/%s", r.NumRetries, r.MaxDelay, r.Profile)
}
