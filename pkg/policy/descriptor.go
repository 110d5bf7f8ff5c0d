package policy

import (
	"gopkg.in/yaml.v3"
)

// maxDepth bounds descriptor nesting; Envoy descriptors are a few entries.
const maxDepth = 32

// descriptorFields is a descriptor's scalars and the nodes of its blocks,
// decoded once the descriptor is known not to be a duplicate.
type descriptorFields struct {
	spec                  DescriptorSpec
	rateLimit, kids, meta *field
}

// limitFlags are the descriptor-level settings that shape its Limit.
type limitFlags struct {
	shadow, detailed, quota bool
	metadata                map[string]any
}

// decodeDescriptors reads a descriptors list into children of parent.
func (d *decoder) decodeDescriptors(parent *Node, n *yaml.Node, path string, depth int) {
	items, ok := d.sequence(n, path, "descriptors dropped")
	if !ok {
		return
	}
	if depth >= maxDepth {
		d.errorf(n, path, "descriptors nested deeper than %d (dropped)", maxDepth)
		return
	}
	for i, it := range items {
		if d.exhausted() {
			return
		}
		d.decodeDescriptor(parent, it, index(path, i), depth)
	}
}

// decodeDescriptor reads one descriptor. A missing or malformed key or
// value drops the descriptor (and what it nests); any other bad field is
// ignored alone.
func (d *decoder) decodeDescriptor(parent *Node, n *yaml.Node, path string, depth int) {
	fs, ok := d.fields(n, path, "descriptor dropped")
	if !ok {
		return
	}
	var df descriptorFields
	must := newBlock(d, "descriptor dropped")
	newBlock(d, "value ignored").decode(fs, &df.spec, hooks{
		"key":         func(f field) { must.str(f, &df.spec.Key) },
		"value":       func(f field) { must.str(f, &df.spec.Value) },
		"rate_limit":  func(f field) { df.rateLimit = &f },
		"descriptors": func(f field) { df.kids = &f },
		"metadata":    func(f field) { df.meta = &f },
	})
	if df.spec.Key == "" && !must.bad {
		must.failf(n, join(path, "key"), "key is required")
	}
	if must.bad {
		return
	}
	d.buildDescriptor(parent, n, path, depth, &df)
}

func (d *decoder) buildDescriptor(parent *Node, n *yaml.Node, path string, depth int, df *descriptorFields) {
	s := &df.spec
	c := newChild(parent, s.Key, s.Value)
	if prev := parent.find(c); prev != nil {
		d.errorf(n, path, "duplicate descriptor %s (descriptor dropped)", c.path)
		return
	}
	c.share = s.ShareThreshold
	if c.share && !c.wildcard && !c.keyOnly {
		d.warnf(n, join(path, "share_threshold"), "share_threshold has no effect on an exact value")
		c.share = false
	}
	c.valueToMetric = s.ValueToMetric
	flags := limitFlags{shadow: s.ShadowMode, detailed: s.DetailedMetric, quota: s.QuotaMode}
	if df.meta != nil {
		flags.metadata = d.decodeMetadata(df.meta)
	}
	if df.rateLimit != nil {
		c.limit = d.buildLimit(df.rateLimit, c.path, flags)
	} else if df.meta != nil || flags.quota {
		d.warnf(n, path, "quota_mode and metadata apply to a descriptor's rate_limit; this descriptor has none")
	}
	if df.kids != nil {
		d.decodeDescriptors(c, df.kids.node, df.kids.path, depth+1)
	}
	parent.add(c)
}

// buildLimit decodes and compiles a rate_limit; nil when it is dropped.
func (d *decoder) buildLimit(f *field, path string, flags limitFlags) *Limit {
	spec := d.decodeRateLimit(f.node, f.path)
	if spec == nil {
		return nil
	}
	if spec.QuotaMode {
		flags.quota = true
	}
	l, err := compileLimit(spec, path, flags)
	if err != nil {
		d.errorf(f.node, f.path, "%v (rate_limit dropped)", err)
		return nil
	}
	return l
}
