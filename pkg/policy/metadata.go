package policy

import (
	"math"
	"strconv"

	"gopkg.in/yaml.v3"
)

// maxMetadataDepth bounds the nesting of a descriptor's metadata.
const maxMetadataDepth = 16

// decodeMetadata reads a descriptor's metadata mapping into plain Go
// values (see Limit.Metadata); nil, with an error, when it is malformed.
func (d *decoder) decodeMetadata(f *field) map[string]any {
	v, err := d.metaValue(f.node, 0)
	if err != nil {
		d.errorf(f.node, f.path, "%v (metadata ignored)", err)
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		d.errorf(f.node, f.path, "want a mapping (metadata ignored)")
		return nil
	}
	return m
}

type metaError string

func (e metaError) Error() string { return string(e) }

// metaValue converts one YAML node, charging the decoder's budget.
func (d *decoder) metaValue(n *yaml.Node, depth int) (any, error) {
	if depth > maxMetadataDepth {
		return nil, metaError("metadata nested deeper than " + strconv.Itoa(maxMetadataDepth))
	}
	if n = d.resolve(n); n == nil {
		return nil, metaError("document too deep or too many aliases")
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := d.resolve(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				return nil, metaError("metadata keys must be scalars")
			}
			v, err := d.metaValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := d.metaValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	return metaScalar(n), nil
}

// metaScalar is a scalar's value by its tag: null, bool, a number (int64
// when it fits, else float64) or a string.
func metaScalar(n *yaml.Node) any {
	switch n.Tag {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
	}
	return n.Value
}
