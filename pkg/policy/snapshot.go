package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
)

// Snapshot is a compiled, immutable set of policies: every domain's
// descriptor tree, every target, and the problems found on the way. A
// Snapshot is safe for concurrent use; its zero value is empty (no domain,
// no target) and usable, and so is a nil *Snapshot.
type Snapshot struct {
	domains   map[string]*Node
	targets   map[string]*Target
	list      []*Target // by name
	byModel   map[string]*Target
	byCluster map[string][]*Target
	problems  []Problem
	files     []FileStatus
	version   string
	opts      LoadOptions
}

// LoadOptions are settings of a whole snapshot, envoyproxy/ratelimit's
// MERGE_DOMAIN_CONFIG and SHADOW_MODE. The zero value is this service's
// default: a domain declared twice is kept from the first file, and
// limits are enforced.
type LoadOptions struct {
	// MergeDomains: files that declare the same domain add their
	// descriptors to it, in file name order; a top-level descriptor
	// declared again is dropped from the later file with an error.
	MergeDomains bool `json:"merge_domains,omitempty"`
	// ShadowMode: every limit is decided, charged and counted, but the
	// overall answer is always OK (descriptor statuses still say which
	// limits are over).
	ShadowMode bool `json:"shadow_mode,omitempty"`
}

// FileStatus is what a snapshot holds of one file.
type FileStatus struct {
	Name string `json:"name"`
	// Hash is the SHA-256 of the content the snapshot was built from.
	Hash string `json:"sha256"`
	// Stale is set when the file's current content was rejected and the
	// snapshot keeps its last good version.
	Stale bool `json:"stale,omitempty"`
	// Rejected is set when the file was rejected and no good version of
	// it was known: it contributes nothing.
	Rejected bool `json:"rejected,omitempty"`
}

// Compile parses files and builds a snapshot. It never fails: every
// problem is in the snapshot's Problems, and what could not be used was
// dropped. Later files (by name) lose to earlier ones on duplicates.
func Compile(files ...File) *Snapshot { return CompileWith(LoadOptions{}, files...) }

// CompileWith is Compile with load options.
func CompileWith(opts LoadOptions, files ...File) *Snapshot {
	ps := make([]*parsed, 0, len(files))
	for _, f := range files {
		ps = append(ps, parseFile(f))
	}
	return assembleWith(ps, nil, nil, opts)
}

// assemble builds a snapshot from parsed files, in name order. stale names
// files whose current version was rejected and replaced by its last good
// version; extra problems (I/O, stale notes) are added as given.
func assemble(ps []*parsed, stale map[string]bool, extra []Problem) *Snapshot {
	return assembleWith(ps, stale, extra, LoadOptions{})
}

// assembleWith is assemble with load options.
func assembleWith(ps []*parsed, stale map[string]bool, extra []Problem, opts LoadOptions) *Snapshot {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	s := &Snapshot{domains: map[string]*Node{}, targets: map[string]*Target{}, opts: opts}
	s.problems = append(s.problems, extra...)
	var raw []*Target
	for _, p := range ps {
		s.problems = append(s.problems, p.problems...)
		s.files = append(s.files, FileStatus{Name: p.name, Hash: hex.EncodeToString(p.hash[:]),
			Stale: stale[p.name], Rejected: p.rejected && !stale[p.name]})
		s.addDomains(p)
		raw = append(raw, s.addTargets(p)...)
	}
	s.linkTargets(raw)
	sortProblems(s.problems)
	s.version = version(ps, opts)
	return s
}

func (s *Snapshot) problem(sev Severity, file, path, msg string) {
	s.problems = append(s.problems, Problem{File: file, Path: path, Message: msg, Severity: sev})
}

func (s *Snapshot) addDomains(p *parsed) {
	for _, d := range p.domains {
		name := d.root.path
		prev, dup := s.domains[name]
		switch {
		case dup && s.opts.MergeDomains:
			s.domains[name] = s.mergeDomain(prev, d, p.name)
		case dup:
			s.problems = append(s.problems, Problem{File: p.name, Path: d.path, Line: d.line, Severity: Error,
				Message: "duplicate domain " + quote(name) + " (domain dropped)"})
		default:
			s.domains[name] = d.root
		}
	}
}

// mergeDomain returns a new root holding prev's descriptors and then d's,
// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does; nodes are shared,
// not copied (they are immutable).
func (s *Snapshot) mergeDomain(prev *Node, d domainDecl, file string) *Node {
	root := &Node{path: prev.path}
	for _, c := range prev.order {
		root.add(c)
	}
	for _, c := range d.root.order {
		if root.find(c) != nil {
			s.problems = append(s.problems, Problem{File: file, Path: d.path, Line: d.line, Severity: Error,
				Message: "descriptor " + c.path + " is already defined for the merged domain (descriptor dropped)"})
			continue
		}
		root.add(c)
	}
	return root
}

func (s *Snapshot) addTargets(p *parsed) []*Target {
	var out []*Target
	for _, t := range p.targets {
		if prev, dup := s.targets[t.Name]; dup {
			s.problem(Error, p.name, "targets."+t.Name, "duplicate target "+quote(t.Name)+", first in "+prev.File+" (target dropped)")
			continue
		}
		s.targets[t.Name] = t
		out = append(out, t)
	}
	return out
}

// linkTargets copies each target with its fallbacks checked against the
// whole set, and builds the lookup tables.
func (s *Snapshot) linkTargets(raw []*Target) {
	known := s.targets
	s.targets = make(map[string]*Target, len(raw))
	s.byModel, s.byCluster = map[string]*Target{}, map[string][]*Target{}
	sort.Slice(raw, func(i, j int) bool { return raw[i].Name < raw[j].Name })
	for _, r := range raw {
		t := *r
		t.Fallbacks = checkFallbacks(r, known, func(sev Severity, path, msg string) { s.problem(sev, r.File, path, msg) })
		s.targets[t.Name] = &t
		s.list = append(s.list, &t)
	}
	s.indexTargets()
}

// indexTargets builds the by-model and by-cluster lookups.
func (s *Snapshot) indexTargets() {
	for _, t := range s.list {
		if t.Name == t.Model {
			s.byModel[t.Model] = t // a target named after its model wins
		}
		s.byCluster[t.Cluster] = append(s.byCluster[t.Cluster], t)
	}
	for _, t := range s.list {
		prev := s.byModel[t.Model]
		switch {
		case prev == nil:
			s.byModel[t.Model] = t
		case prev != t:
			s.problem(Warning, t.File, "targets."+t.Name+".model", "model "+quote(t.Model)+
				" is also served by target "+quote(prev.Name)+"; lookups by model pick "+quote(prev.Name))
		}
	}
}

func version(ps []*parsed, opts LoadOptions) string {
	h := sha256.New()
	for _, p := range ps {
		h.Write([]byte(p.name))
		h.Write([]byte{0})
		h.Write(p.hash[:])
	}
	if opts != (LoadOptions{}) {
		fmt.Fprintf(h, "merge=%t shadow=%t", opts.MergeDomains, opts.ShadowMode)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Options returns the load options the snapshot was built with.
func (s *Snapshot) Options() LoadOptions {
	if s == nil {
		return LoadOptions{}
	}
	return s.opts
}

// ShadowMode reports whether no request may be denied (LoadOptions).
func (s *Snapshot) ShadowMode() bool { return s.Options().ShadowMode }

// Domain is the root node of a domain's descriptor tree; nil if unknown.
func (s *Snapshot) Domain(name string) *Node {
	if s == nil {
		return nil
	}
	return s.domains[name]
}

// Domains returns the domain names, sorted.
func (s *Snapshot) Domains() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.domains))
	for d := range s.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Match returns the limit for a request descriptor, nil for none, with
// envoyproxy/ratelimit's rules: walk the entries, taking at each level the
// best child (exact value, else the first matching glob, else key-only);
// the limit applies only if the walk reaches the last entry, so a request
// deeper or shallower than the configured limit gets none. Match does not
// allocate.
func (s *Snapshot) Match(domain string, entries []Entry) *Limit {
	n := s.Domain(domain)
	if n == nil || len(entries) == 0 {
		return nil
	}
	for _, e := range entries {
		if n = n.Child(e.Key, e.Value); n == nil {
			return nil
		}
	}
	return n.limit
}

// MatchPath is Match that also appends to dst the node matched for each
// entry, so the caller can build a counter key (see Node.CounterValue).
// The nodes are appended even when no limit applies. It does not allocate
// when dst has room for len(entries) more nodes.
func (s *Snapshot) MatchPath(domain string, entries []Entry, dst []*Node) ([]*Node, *Limit) {
	n := s.Domain(domain)
	if n == nil || len(entries) == 0 {
		return dst, nil
	}
	for _, e := range entries {
		n = n.Child(e.Key, e.Value)
		if n == nil {
			return dst, nil
		}
		dst = append(dst, n)
	}
	return dst, n.limit
}

// Target returns the target called name, nil if none.
func (s *Snapshot) Target(name string) *Target {
	if s == nil {
		return nil
	}
	return s.targets[name]
}

// TargetByModel returns the target whose model is model; when several
// share it, the one named after the model, else the first by name (a
// warning says so).
func (s *Snapshot) TargetByModel(model string) *Target {
	if s == nil {
		return nil
	}
	return s.byModel[model]
}

// TargetByCluster returns the first target, by name, served by cluster.
// Several targets often share a cluster; see TargetsByCluster.
func (s *Snapshot) TargetByCluster(cluster string) *Target {
	if ts := s.TargetsByCluster(cluster); len(ts) > 0 {
		return ts[0]
	}
	return nil
}

// TargetsByCluster returns the targets served by cluster, by name. The
// slice is shared: do not modify it.
func (s *Snapshot) TargetsByCluster(cluster string) []*Target {
	if s == nil {
		return nil
	}
	return s.byCluster[cluster]
}

// Targets returns every target, by name. The slice is shared: do not
// modify it.
func (s *Snapshot) Targets() []*Target {
	if s == nil {
		return nil
	}
	return s.list
}

// Problems returns the problems found building the snapshot, by file. The
// slice is shared: do not modify it.
func (s *Snapshot) Problems() []Problem {
	if s == nil {
		return nil
	}
	return s.problems
}

// Files describes the files the snapshot was built from, by name.
func (s *Snapshot) Files() []FileStatus {
	if s == nil {
		return nil
	}
	return s.files
}

// Version is a short hash of the files' names and contents: equal
// versions mean equal policies.
func (s *Snapshot) Version() string {
	if s == nil {
		return ""
	}
	return s.version
}
