package ratelimitsvc_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ratelimit-svc/ratelimit-svc"

// forbidden lists, per package, import path prefixes it must not depend
// on, directly or not, with the reason. Arrows point inward: the limiter
// knows nothing of Envoy, YAML, Redis or gRPC; resilience is a leaf; only
// envoyapi (and commands) speak go-control-plane; only commands build the
// OTel SDK.
var forbidden = map[string][]struct{ prefix, why string }{
	"pkg/limiter": {
		{module + "/pkg/policy", "the limiter knows no policy files"},
		{module + "/pkg/envoyapi", "the limiter knows no Envoy"},
		{module + "/pkg/resilience", "the limiter imports no other project package"},
		{"github.com/envoyproxy/", "the limiter knows no Envoy"},
		{"google.golang.org/grpc", "the limiter knows no gRPC"},
		{"gopkg.in/yaml", "the limiter knows no YAML"},
		{"github.com/redis/", "Redis lives behind the Store interface"},
		{"go.opentelemetry.io/otel/sdk", "only commands build the OTel SDK"},
	},
	"pkg/resilience": {
		{module + "/", "resilience is a leaf"},
		{"github.com/envoyproxy/", "resilience knows no Envoy"},
		{"google.golang.org/grpc", "resilience knows no gRPC"},
		{"github.com/redis/", "resilience knows no Redis"},
	},
	"pkg/resilience/retryhint": {
		{module + "/", "retryhint is a leaf"},
	},
	"pkg/policy": {
		{module + "/pkg/envoyapi", "policy knows no Envoy"},
		{module + "/pkg/resilience", "policy uses only limiter value types"},
		{"github.com/envoyproxy/", "policy knows no Envoy"},
		{"google.golang.org/grpc", "policy knows no gRPC"},
		{"github.com/redis/", "policy knows no Redis"},
	},
	"pkg/llmusage": {
		{module + "/", "llmusage is a leaf"},
		{"github.com/envoyproxy/", "llmusage knows no Envoy"},
		{"google.golang.org/", "llmusage knows no gRPC or protobuf"},
	},
	"pkg/routing": {
		{module + "/pkg/envoyapi", "routing is shared by both ext_proc roles and knows no Envoy"},
		{"github.com/envoyproxy/", "routing knows no Envoy"},
		{"google.golang.org/grpc", "routing knows no gRPC"},
		{"google.golang.org/protobuf", "routing knows no protobuf"},
		{"github.com/redis/", "routing never knows which store is behind the limiter"},
	},
	"pkg/envoyapi": {
		{"github.com/redis/", "envoyapi never knows which store is behind the limiter"},
		{"go.opentelemetry.io/otel/sdk", "only commands build the OTel SDK"},
	},
}

func TestDependencyRule(t *testing.T) {
	for pkg, rules := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "./"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"/"+pkg || strings.HasPrefix(dep, module+"/"+pkg+"/") {
				continue
			}
			for _, r := range rules {
				if strings.HasPrefix(dep, r.prefix) {
					t.Errorf("%s depends on %s: %s", pkg, dep, r.why)
				}
			}
		}
	}
}

// stdlibOnly lists the packages that import nothing but the standard
// library, directly or not.
var stdlibOnly = []string{"pkg/resilience/retryhint"}

func TestStandardLibraryOnly(t *testing.T) {
	for _, pkg := range stdlibOnly {
		out, err := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.ImportPath}}{{end}}`, "./"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != module+"/"+pkg {
				t.Errorf("%s depends on %s: it imports the standard library only", pkg, dep)
			}
		}
	}
}

// TestOnlyEnvoyAPIImportsControlPlane keeps go-control-plane at the edge:
// among pkg/ packages only envoyapi may import it directly.
func TestOnlyEnvoyAPIImportsControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./pkg/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], module+"/pkg/envoyapi") {
			continue
		}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, "github.com/envoyproxy/go-control-plane") {
				t.Errorf("%s imports %s; only pkg/envoyapi may", f[0], imp)
			}
		}
	}
}
