package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"gopkg.in/yaml.v3"

	"github.com/ratelimit-svc/ratelimit-svc/internal/envoyconf"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
)

// root is the repository root, relative to this package.
const root = ".."

func repoPath(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }

func readFile(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoPath(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeYAMLDocs decodes every document of a multi-document YAML file.
func decodeYAMLDocs(t *testing.T, name string, data []byte) []*yaml.Node {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs = append(docs, &n)
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML document", name)
	}
	return docs
}

// toJSON turns a decoded YAML value (anchors resolved) into JSON.
func toJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeProto reads a YAML value into m the way Envoy does: through JSON,
// with protojson and the global type registry for Any values. Unknown
// fields are errors.
func decodeProto(t *testing.T, where string, v any, m proto.Message) bool {
	t.Helper()
	if err := protojson.Unmarshal(toJSON(t, v), m); err != nil {
		t.Errorf("%s: %v", where, err)
		return false
	}
	return true
}

// validateTree reports every validation problem of m and the messages
// inside it, Any values unpacked.
func validateTree(t *testing.T, m protoreflect.Message, where string) {
	t.Helper()
	for _, err := range envoyconf.Validate(m, where) {
		t.Error(err)
	}
}

// policyFiles reads the policy files of a directory of the repository
// (not recursive), named as the service would see them under prefix.
func policyFiles(t *testing.T, dir, prefix string) []policy.File {
	t.Helper()
	matches, err := filepath.Glob(repoPath(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var fs []policy.File
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, policy.File{Name: prefix + filepath.Base(m), Data: b})
	}
	if len(fs) == 0 {
		t.Fatalf("no policy files in %s", dir)
	}
	return fs
}

// compileClean compiles policy files and fails on any problem.
func compileClean(t *testing.T, what string, files []policy.File) *policy.Snapshot {
	t.Helper()
	s := policy.Compile(files...)
	for _, p := range s.Problems() {
		t.Errorf("%s: %s %s %s: %s", what, p.Severity, p.File, p.Path, p.Message)
	}
	return s
}

func targetNames(s *policy.Snapshot) []string {
	var names []string
	for _, tg := range s.Targets() {
		names = append(names, tg.Name)
	}
	sort.Strings(names)
	return names
}

// selects says whether every label of selector is in labels with the
// same value, as a Kubernetes equality selector does.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// splitHostPort splits "host:port" without resolving anything.
func splitHostPort(s string) (host, port string) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i+1:]
}
