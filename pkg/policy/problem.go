package policy

import (
	"fmt"
	"sort"
)

// Severity ranks a Problem.
type Severity uint8

const (
	// Warning is a problem that changes nothing or only drops something
	// harmless: an unknown key, an ignored value, a truncated list.
	Warning Severity = iota + 1
	// Error means a block, a record or a whole file was dropped.
	Error
)

// String returns "warning" or "error".
func (s Severity) String() string {
	switch s {
	case Warning:
		return "warning"
	case Error:
		return "error"
	}
	return fmt.Sprintf("severity(%d)", uint8(s))
}

// MarshalText renders s as its name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Problem is one finding about a policy file. Path locates the offending
// node inside the file, e.g. "descriptors[2].rate_limit.unit" or
// "targets.gpt-4o.retry_config"; it is empty for the file as a whole.
type Problem struct {
	File     string   `json:"file"`
	Path     string   `json:"path,omitempty"`
	Line     int      `json:"line,omitempty"`
	Message  string   `json:"message"`
	Severity Severity `json:"severity"`
}

// String renders p as "file:path: message" (or "file: message").
func (p Problem) String() string {
	if p.Path == "" {
		return p.File + ": " + p.Message
	}
	return p.File + ":" + p.Path + ": " + p.Message
}

// HasErrors reports whether any problem has Error severity.
func HasErrors(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == Error {
			return true
		}
	}
	return false
}

// sortProblems orders problems by file, then keeps each file's own order
// (the order the parser met them in).
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].File < ps[j].File })
}
