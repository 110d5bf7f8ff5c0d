package policy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces the dependency rule: policy compiles YAML to
// limiter values and knows nothing of Envoy, gRPC, Redis or the adapters.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	bad := map[string]string{
		"github.com/envoyproxy/go-control-plane":                "Envoy protos belong to envoyapi",
		"google.golang.org/grpc":                                "gRPC belongs to envoyapi and cmd",
		"github.com/redis/go-redis":                             "Redis belongs to the limiter's store",
		"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi":   "adapters import policy, not the reverse",
		"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience": "policy may use limiter value types only",
		"go.opentelemetry.io/otel/sdk":                          "only cmd builds the OTel SDK",
	}
	for _, dep := range strings.Fields(string(out)) {
		for prefix, why := range bad {
			if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
				t.Errorf("policy depends on %s: %s", dep, why)
			}
		}
	}
}
