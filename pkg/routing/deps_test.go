package routing_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoProtocol keeps routing free of wire protocols: both ext_proc
// roles share it, and it is tested without protos.
func TestNoProtocol(t *testing.T) {
	forbidden := []string{"github.com/envoyproxy/", "google.golang.org/grpc", "google.golang.org/protobuf",
		"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"}
	out, err := exec.Command("go", "list", "-f", `{{join .Deps "\n"}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		for _, prefix := range forbidden {
			if strings.HasPrefix(dep, prefix) {
				t.Errorf("routing depends on %s", dep)
			}
		}
	}
}
