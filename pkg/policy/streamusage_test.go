package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamUsageValues: stream_usage takes inject or off; anything else
// is an error naming the field, and the target keeps the default (off).
func TestStreamUsageValues(t *testing.T) {
	for _, tc := range []struct{ value, want, problem string }{
		{"inject", StreamUsageInject, ""},
		{"off", "", ""},
		{"always", "", `"always": want inject or off`},
	} {
		dir := t.TempDir()
		text := "targets:\n  m:\n    stream_usage: " + tc.value + "\n    default_max_tokens: 100\n"
		if err := os.WriteFile(filepath.Join(dir, "targets.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		m := s.Target("m")
		if m == nil || m.StreamUsage != tc.want || m.DefaultMaxTokens != 100 {
			t.Errorf("stream_usage %s: target %+v", tc.value, m)
		}
		var got []string
		for _, p := range s.Problems() {
			got = append(got, p.String())
		}
		if all := strings.Join(got, "\n"); tc.problem == "" && all != "" || !strings.Contains(all, tc.problem) ||
			tc.problem != "" && !strings.Contains(all, "stream_usage") {
			t.Errorf("stream_usage %s: problems %q, want %q", tc.value, all, tc.problem)
		}
	}
}
