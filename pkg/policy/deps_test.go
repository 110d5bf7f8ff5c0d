package policy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoOTelSDK keeps the one part of the dependency rule for policy that
// the repository's dependency test does not state: only commands build
// the OpenTelemetry SDK. The rest of the rule (no Envoy, gRPC, Redis,
// envoyapi or resilience) is checked there.
func TestNoOTelSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const sdk = "go.opentelemetry.io/otel/sdk"
	for _, dep := range strings.Fields(string(out)) {
		if dep == sdk || strings.HasPrefix(dep, sdk+"/") {
			t.Errorf("policy depends on %s: only commands build the OpenTelemetry SDK", dep)
		}
	}
}
