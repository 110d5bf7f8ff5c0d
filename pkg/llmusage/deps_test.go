package llmusage

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly keeps the package protocol-free: it depends on
// the standard library alone, so any part of the service can use it.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasSuffix(dep, "/pkg/llmusage") {
			t.Errorf("llmusage depends on %s", dep)
		}
	}
}
