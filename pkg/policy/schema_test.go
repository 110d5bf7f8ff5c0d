package policy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// schemaBlock is one block of the schema: its type, the path of its
// problems, a minimal valid content, and the document holding a content.
type schemaBlock struct {
	typ  reflect.Type
	path string
	base map[string]any
	doc  func(content map[string]any) map[string]any
}

func schemaBlocks() []schemaBlock {
	descriptor := func(m map[string]any) map[string]any {
		return map[string]any{"domain": "d", "descriptors": []any{m}}
	}
	rateLimit := func(m map[string]any) map[string]any {
		return descriptor(map[string]any{"key": "k", "rate_limit": m})
	}
	target := func(key string) func(map[string]any) map[string]any {
		return func(m map[string]any) map[string]any {
			if key != "" {
				m = map[string]any{key: m}
			}
			return map[string]any{"targets": map[string]any{"t": m}}
		}
	}
	return []schemaBlock{
		{reflect.TypeFor[documentSpec](), "", map[string]any{"domain": "d"}, func(m map[string]any) map[string]any { return m }},
		{reflect.TypeFor[DescriptorSpec](), "descriptors[0]", map[string]any{"key": "k"}, descriptor},
		{reflect.TypeFor[RateLimitSpec](), "descriptors[0].rate_limit", map[string]any{"unit": "second", "requests_per_unit": 1}, rateLimit},
		{reflect.TypeFor[ReplacesSpec](), "descriptors[0].rate_limit.replaces[0]", map[string]any{"name": "other"},
			func(m map[string]any) map[string]any {
				return rateLimit(map[string]any{"unit": "second", "requests_per_unit": 1, "replaces": []any{m}})
			}},
		{reflect.TypeFor[TargetSpec](), "targets.t", map[string]any{}, target("")},
		{reflect.TypeFor[RateLimitsSpec](), "targets.t.rate_limits", map[string]any{}, target("rate_limits")},
		{reflect.TypeFor[TokenLimitsSpec](), "targets.t.token_limits", map[string]any{}, target("token_limits")},
		{reflect.TypeFor[RetryConfigSpec](), "targets.t.retry_config", map[string]any{}, target("retry_config")},
	}
}

// schemaStructs returns the struct types reachable from t through its
// fields (slices, maps and pointers followed), inline ones excepted: the
// blocks a file may hold.
func schemaStructs(t reflect.Type, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	for f := range t.Fields() {
		if strings.HasSuffix(f.Tag.Get("yaml"), ",inline") {
			delete(seen, f.Type)
			for g := range f.Type.Fields() {
				schemaStructs(g.Type, seen)
			}
			continue
		}
		schemaStructs(f.Type, seen)
	}
}

// TestSchemaTags: every field of every block has a yaml key of its own,
// and the blocks this test probes are all the schema's blocks.
func TestSchemaTags(t *testing.T) {
	reachable := map[reflect.Type]bool{}
	schemaStructs(reflect.TypeFor[documentSpec](), reachable)
	var probed []reflect.Type
	for _, b := range schemaBlocks() {
		probed = append(probed, b.typ)
		if !reachable[b.typ] {
			t.Errorf("%s is probed but is no block of the schema", b.typ)
		}
	}
	for typ := range reachable {
		if !slices.Contains(probed, typ) {
			t.Errorf("%s is a block of the schema that schemaBlocks does not probe: add it", typ)
		}
		named := 0
		for f := range typ.Fields() {
			tag := f.Tag.Get("yaml")
			name, _, _ := strings.Cut(tag, ",")
			switch {
			case strings.HasSuffix(tag, ",inline"):
				named += len(keysOf(f.Type))
			case name == "" || name == "-":
				t.Errorf("%s.%s has no yaml key", typ, f.Name)
			default:
				named++
			}
		}
		if n := len(keysOf(typ)); n != named {
			t.Errorf("%s: %d keys for %d named fields (a key used twice)", typ, n, named)
		}
	}
}

// TestSchemaKeysRead compares the keys the decoder reads with the
// schema's, both ways, in every block: each key of a block's type is read
// (a value of the wrong kind is reported at its path, not as an unknown
// key), and a key the type lacks is an unknown-key warning.
func TestSchemaKeysRead(t *testing.T) {
	for _, b := range schemaBlocks() {
		t.Run(b.typ.Name(), func(t *testing.T) {
			base := compileDoc(t, b.doc(b.base))
			if HasErrors(base) {
				t.Fatalf("the base content has errors: %v", base)
			}
			for key, idx := range keysOf(b.typ) {
				content := copyMap(b.base)
				content[key] = wrongValue(b.typ.FieldByIndex(idx).Type)
				checkRead(t, compileDoc(t, b.doc(content)), join(b.path, key))
			}
			content := copyMap(b.base)
			content["no_such_key"] = 1
			ps := compileDoc(t, b.doc(content))
			want := Problem{File: "schema.yaml", Path: join(b.path, "no_such_key"), Message: `unknown key "no_such_key" ignored`, Severity: Warning}
			if !slices.ContainsFunc(ps, func(p Problem) bool { p.Line = 0; return p == want }) {
				t.Errorf("no_such_key: problems %v, want %v", ps, want)
			}
		})
	}
}

// checkRead asserts that the value at path was read and refused, and that
// no key was unknown and the decoder knew every key it has a hook for.
func checkRead(t *testing.T, ps []Problem, path string) {
	t.Helper()
	read := false
	for _, p := range ps {
		switch {
		case strings.HasPrefix(p.Message, "unknown key"), strings.Contains(p.Message, "internal error"):
			t.Errorf("%s: %s", path, p)
		case p.Path == path && !strings.HasPrefix(p.Message, "key repeated"):
			read = true
		}
	}
	if !read {
		t.Errorf("%s: a value of the wrong kind was not reported (problems %v): the decoder does not read it", path, ps)
	}
}

// wrongValue is a value of a kind a field of type t never takes: a list
// where a mapping is wanted, else a mapping.
func wrongValue(t reflect.Type) any {
	if t.Kind() == reflect.Map || t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		return []any{1}
	}
	return map[string]any{"x": 1}
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func compileDoc(t *testing.T, doc map[string]any) []Problem {
	t.Helper()
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return Compile(File{Name: "schema.yaml", Data: data}).Problems()
}
