package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// nodeBudget bounds how many YAML nodes one file may make the decoder
// visit, aliases expanded. It stops alias bombs, not real policies.
const nodeBudget = 200_000

// decoder walks one file's yaml.Node tree, collecting problems with their
// paths. It never stops at a bad block: the caller drops that block and
// goes on.
type decoder struct {
	file     string
	problems []Problem
	budget   int
}

func newDecoder(file string) *decoder { return &decoder{file: file, budget: nodeBudget} }

func (d *decoder) add(sev Severity, n *yaml.Node, path, format string, args ...any) {
	p := Problem{File: d.file, Path: path, Message: fmt.Sprintf(format, args...), Severity: sev}
	if n != nil {
		p.Line = n.Line
	}
	d.problems = append(d.problems, p)
}

func (d *decoder) warnf(n *yaml.Node, path, format string, args ...any) {
	d.add(Warning, n, path, format, args...)
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.add(Error, n, path, format, args...)
}

// exhausted reports whether the node budget ran out.
func (d *decoder) exhausted() bool { return d.budget <= 0 }

// resolve follows aliases and charges the budget; nil once it ran out.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	d.budget--
	if d.budget < 0 {
		return nil
	}
	return n
}

// field is one key/value pair of a mapping, with the value's path.
type field struct {
	key  string
	node *yaml.Node
	path string
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "a document"
}

// mapping returns n's pairs (merge keys expanded, later keys winning and a
// repeated key warned about). When n is not a mapping it reports that,
// followed by outcome ("rate_limit dropped"), and returns false.
func (d *decoder) mapping(n *yaml.Node, path, outcome string) ([]field, bool) {
	n = d.resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		if n != nil {
			d.errorf(n, path, "want a mapping, got %s (%s)", kindName(n), outcome)
		}
		return nil, false
	}
	var out []field
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k == nil {
			return nil, false
		}
		if k.Tag == "!!merge" {
			out = d.merge(out, seen, v, path)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.warnf(k, path, "ignoring a non-scalar key")
			continue
		}
		f := field{key: k.Value, node: v, path: join(path, k.Value)}
		if j, dup := seen[k.Value]; dup {
			if !out[j].merged() {
				d.warnf(k, f.path, "key repeated; the later value wins")
			}
			out[j] = f
			continue
		}
		seen[k.Value] = len(out)
		out = append(out, f)
	}
	return out, true
}

// merged marks fields that came in through a merge key ("<<"): an own key
// overrides them silently.
func (f field) merged() bool { return f.path == "" }

func (d *decoder) merge(out []field, seen map[string]int, v *yaml.Node, path string) []field {
	v = d.resolve(v)
	if v == nil {
		return out
	}
	srcs := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		srcs = v.Content
	}
	for _, src := range srcs {
		fs, ok := d.mapping(src, path, "merge ignored")
		if !ok {
			continue
		}
		for _, f := range fs {
			if _, dup := seen[f.key]; dup {
				continue
			}
			f.path = ""
			seen[f.key] = len(out)
			out = append(out, f)
		}
	}
	return out
}

// fixPaths gives merged fields their path under the merging mapping.
func fixPaths(fs []field, path string) []field {
	for i := range fs {
		if fs[i].path == "" {
			fs[i].path = join(path, fs[i].key)
		}
	}
	return fs
}

// fields is mapping with merged fields' paths filled in.
func (d *decoder) fields(n *yaml.Node, path, outcome string) ([]field, bool) {
	fs, ok := d.mapping(n, path, outcome)
	return fixPaths(fs, path), ok
}

// sequence returns n's items; null is an empty list. Like mapping, it
// reports anything else with outcome.
func (d *decoder) sequence(n *yaml.Node, path, outcome string) ([]*yaml.Node, bool) {
	n = d.resolve(n)
	switch {
	case n == nil:
		return nil, false
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil, true
	case n.Kind != yaml.SequenceNode:
		d.errorf(n, path, "want a list, got %s (%s)", kindName(n), outcome)
		return nil, false
	}
	return n.Content, true
}

func (d *decoder) scalar(n *yaml.Node) (*yaml.Node, error) {
	n = d.resolve(n)
	if n == nil {
		return nil, errors.New("document too deep or too many aliases")
	}
	if n.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("want a scalar, got %s", kindName(n))
	}
	return n, nil
}

// str accepts any scalar (a YAML number or bool as its text); null is "".
func (d *decoder) str(n *yaml.Node) (string, error) {
	s, err := d.scalar(n)
	if err != nil {
		return "", err
	}
	if s.Tag == "!!null" {
		return "", nil
	}
	return s.Value, nil
}

func (d *decoder) boolean(n *yaml.Node) (bool, error) {
	s, err := d.scalar(n)
	if err != nil {
		return false, err
	}
	var b bool
	if s.Tag != "!!bool" || s.Decode(&b) != nil {
		return false, fmt.Errorf("want true or false, got %s", kindName(s))
	}
	return b, nil
}

// uint decodes an integer in [0, max].
func (d *decoder) uint(n *yaml.Node, max uint64) (uint64, error) {
	s, err := d.scalar(n)
	if err != nil {
		return 0, err
	}
	var v int64
	if s.Tag != "!!int" || s.Decode(&v) != nil || v < 0 || uint64(v) > max {
		return 0, fmt.Errorf("want an integer from 0 to %d, got %s", max, kindName(s))
	}
	return uint64(v), nil
}

func (d *decoder) uint32(n *yaml.Node) (uint32, error) {
	v, err := d.uint(n, math.MaxUint32)
	return uint32(v), err
}

// float decodes a finite number ≥ 0.
func (d *decoder) float(n *yaml.Node) (float64, error) {
	s, err := d.scalar(n)
	if err != nil {
		return 0, err
	}
	var v float64
	ok := (s.Tag == "!!int" || s.Tag == "!!float") && s.Decode(&v) == nil
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("want a number ≥ 0, got %s", kindName(s))
	}
	return v, nil
}

// duration decodes a Go duration string ("100ms", "1s"), ≥ 0.
func (d *decoder) duration(n *yaml.Node) (time.Duration, error) {
	s, err := d.scalar(n)
	if err != nil {
		return 0, err
	}
	v, perr := time.ParseDuration(s.Value)
	if s.Tag != "!!str" || perr != nil || v < 0 {
		return 0, fmt.Errorf("want a duration such as \"100ms\", got %s", kindName(s))
	}
	return v, nil
}

// block decodes the fields of one block (a rate_limit, a retry_config…).
// Every bad field is reported as an error ending with the block's outcome
// ("rate_limit dropped", "value ignored"), so a user fixes them all in one
// go; bad tells the caller whether any field failed.
type block struct {
	d    *decoder
	name string
	bad  bool
}

func newBlock(d *decoder, outcome string) *block { return &block{d: d, name: outcome} }

func (b *block) fail(f field, err error) {
	b.d.errorf(f.node, f.path, "%v (%s)", err, b.name)
	b.bad = true
}

func (b *block) failf(n *yaml.Node, path, format string, args ...any) {
	b.d.errorf(n, path, "%s (%s)", fmt.Sprintf(format, args...), b.name)
	b.bad = true
}

func (b *block) unknown(f field) { b.d.warnf(f.node, f.path, "unknown key %q ignored", f.key) }

func (b *block) str(f field, dst *string) {
	if v, err := b.d.str(f.node); err != nil {
		b.fail(f, err)
	} else {
		*dst = v
	}
}

func (b *block) boolean(f field, dst *bool) {
	if v, err := b.d.boolean(f.node); err != nil {
		b.fail(f, err)
	} else {
		*dst = v
	}
}

func (b *block) uint32(f field, dst *uint32) {
	if v, err := b.d.uint32(f.node); err != nil {
		b.fail(f, err)
	} else {
		*dst = v
	}
}

func (b *block) float(f field, dst *float64) {
	if v, err := b.d.float(f.node); err != nil {
		b.fail(f, err)
	} else {
		*dst = v
	}
}

func (b *block) duration(f field, dst *time.Duration) {
	if v, err := b.d.duration(f.node); err != nil {
		b.fail(f, err)
	} else {
		*dst = v
	}
}
