package policy

import "strings"

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key   string
	Value string
}

// Node is one level of a domain's compiled descriptor tree. A domain's
// root is a Node too (Key empty). Nodes are immutable; every method is
// safe for concurrent use, allocation-free, and safe on a nil *Node.
type Node struct {
	key      string
	value    string
	keyOnly  bool
	wildcard bool
	share    bool
	// valueToMetric: metrics name this level by the request's value.
	valueToMetric bool
	glob          glob
	limit         *Limit
	path          string
	children      map[string]*keyGroup
	order         []*Node // children in file order
}

// keyGroup holds the children of a node that share one key, by kind of
// match, in precedence order.
type keyGroup struct {
	exact   map[string]*Node
	wild    []*Node // file order: the first matching glob wins
	keyOnly *Node
}

// Key is the configured descriptor key.
func (n *Node) Key() string {
	if n == nil {
		return ""
	}
	return n.key
}

// Value is the configured value: a literal, a glob with '*', or "" for a
// key-only descriptor.
func (n *Node) Value() string {
	if n == nil {
		return ""
	}
	return n.value
}

// KeyOnly reports whether the descriptor has no value and so matches any
// value of its key.
func (n *Node) KeyOnly() bool { return n != nil && n.keyOnly }

// Wildcard reports whether the configured value is a glob.
func (n *Node) Wildcard() bool { return n != nil && n.wildcard }

// ShareThreshold reports whether every value this node matches shares one
// counter (share_threshold on a wildcard or key-only descriptor).
func (n *Node) ShareThreshold() bool { return n != nil && n.share }

// ValueToMetric reports whether metrics name this level by the request's
// value rather than the configured one (value_to_metric).
func (n *Node) ValueToMetric() bool { return n != nil && n.valueToMetric }

// Limit is the node's rate limit, nil when it has none.
func (n *Node) Limit() *Limit {
	if n == nil {
		return nil
	}
	return n.limit
}

// Path names the node: "domain.key_value.key", with configured values.
func (n *Node) Path() string {
	if n == nil {
		return ""
	}
	return n.path
}

// CounterValue is the value to put in a counter key for a request entry
// that matched n with value v: v itself, or the configured pattern when
// matching values share a counter (so "foo*" counts foo1 and foo2
// together, and a shared key-only node counts under the empty value).
func (n *Node) CounterValue(v string) string {
	if n != nil && n.share {
		return n.value
	}
	return v
}

// Child is the node matching entry key=value below n: an exact value
// beats a glob value (first in file order) beats a key-only descriptor.
// It returns nil when nothing matches.
func (n *Node) Child(key, value string) *Node {
	if n == nil {
		return nil
	}
	g := n.children[key]
	if g == nil {
		return nil
	}
	if c := g.exact[value]; c != nil {
		return c
	}
	for _, c := range g.wild {
		if c.glob.match(value) {
			return c
		}
	}
	return g.keyOnly
}

// Children returns the child nodes in file order. The slice is shared:
// do not modify it.
func (n *Node) Children() []*Node {
	if n == nil {
		return nil
	}
	return n.order
}

// find returns the sibling that c would duplicate, if any.
func (n *Node) find(c *Node) *Node {
	g := n.children[c.key]
	if g == nil {
		return nil
	}
	switch {
	case c.keyOnly:
		return g.keyOnly
	case c.wildcard:
		for _, w := range g.wild {
			if w.value == c.value {
				return w
			}
		}
		return nil
	}
	return g.exact[c.value]
}

// add attaches c below n; the caller checked find first.
func (n *Node) add(c *Node) {
	if n.children == nil {
		n.children = map[string]*keyGroup{}
	}
	g := n.children[c.key]
	if g == nil {
		g = &keyGroup{}
		n.children[c.key] = g
	}
	switch {
	case c.keyOnly:
		g.keyOnly = c
	case c.wildcard:
		g.wild = append(g.wild, c)
	default:
		if g.exact == nil {
			g.exact = map[string]*Node{}
		}
		g.exact[c.value] = c
	}
	n.order = append(n.order, c)
}

// newChild builds the node for key/value below parent.
func newChild(parent *Node, key, value string) *Node {
	c := &Node{key: key, value: value, keyOnly: value == ""}
	c.path = parent.path + "." + key
	if value != "" {
		c.path += "_" + value
	}
	if strings.Contains(value, "*") {
		c.wildcard, c.glob = true, compileGlob(value)
	}
	return c
}

// glob matches '*' (any run of bytes, possibly empty); every other byte
// is literal.
type glob struct {
	prefix, suffix string
	middle         []string
	min            int
}

func compileGlob(p string) glob {
	parts := strings.Split(p, "*")
	g := glob{prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, m := range parts[1 : len(parts)-1] {
		if m != "" {
			g.middle = append(g.middle, m)
		}
	}
	g.min = len(g.prefix) + len(g.suffix)
	for _, m := range g.middle {
		g.min += len(m)
	}
	return g
}

// match reports whether s matches; the leftmost placement of each middle
// part is always a valid one, so no backtracking is needed.
func (g *glob) match(s string) bool {
	if len(s) < g.min || !strings.HasPrefix(s, g.prefix) || !strings.HasSuffix(s, g.suffix) {
		return false
	}
	s = s[len(g.prefix) : len(s)-len(g.suffix)]
	for _, m := range g.middle {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}
