package retryhint

import "strings"

// Headers gives every value of a response header field by name, matched
// case-insensitively. [net/http.Header] satisfies it, and so does any
// list of header lines with a Values method. A nil Headers has no fields.
type Headers interface {
	Values(name string) []string
}

// first returns the first value of name, trimmed of optional white space,
// and whether the field was present.
func first(h Headers, name string) (string, bool) {
	vs := values(h, name)
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
