package resilience

import "strings"

// Headers gives every value of a response header field by name. Names are
// matched case-insensitively. [net/http.Header] satisfies it, [HeaderList]
// adapts Envoy's header list, and [HeaderFunc] adapts any lookup.
type Headers interface {
	Values(name string) []string
}

// HeaderField is one header line, as Envoy's ext_proc delivers it.
type HeaderField struct {
	Name  string
	Value string
}

// HeaderList is a list of header lines in arrival order. A name may repeat.
type HeaderList []HeaderField

// Values returns the values of every field named name, compared
// case-insensitively, in order.
func (l HeaderList) Values(name string) []string {
	var out []string
	for _, f := range l {
		if strings.EqualFold(f.Name, name) {
			out = append(out, f.Value)
		}
	}
	return out
}

// HeaderFunc adapts a lookup function to [Headers]. The function receives
// the field name in lower case.
type HeaderFunc func(name string) []string

// Values calls f with the lower-cased name.
func (f HeaderFunc) Values(name string) []string {
	if f == nil {
		return nil
	}
	return f(strings.ToLower(name))
}

// first returns the first value of name, trimmed of optional white space,
// and whether the field was present.
func first(h Headers, name string) (string, bool) {
	if h == nil {
		return "", false
	}
	vs := h.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return strings.TrimSpace(vs[0]), true
}

// values returns all values of name, or nil when h is nil.
func values(h Headers, name string) []string {
	if h == nil {
		return nil
	}
	return h.Values(name)
}
