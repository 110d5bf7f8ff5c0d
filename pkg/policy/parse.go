package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"strconv"

	"gopkg.in/yaml.v3"
)

// File is one policy file's name and content.
type File struct {
	Name string
	Data []byte
}

// parsed is one file after parsing: everything that can be compiled
// without looking at other files. It is immutable and may be reused by
// later snapshots while the file is unchanged (or broken).
type parsed struct {
	name     string
	hash     [sha256.Size]byte
	rejected bool // not a policy file at all: nothing else is set
	domains  []domainDecl
	targets  []*Target
	problems []Problem
}

// domainDecl is one domain block and where it was declared.
type domainDecl struct {
	root *Node
	path string
	line int
}

// parseFile parses one file. A file that is not YAML, or whose document is
// not a mapping, is rejected whole with an Error problem.
func parseFile(f File) *parsed {
	p := &parsed{name: f.Name, hash: sha256.Sum256(f.Data)}
	d := newDecoder(f.Name)
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return reject(p, Problem{Message: "not valid YAML: " + err.Error() + " (file rejected)"})
		}
		if !d.decodeDocument(p, &doc, docPrefix(i)) {
			return reject(p, d.problems[len(d.problems)-1])
		}
	}
	if d.exhausted() {
		return reject(p, Problem{Message: "too many YAML nodes, aliases expanded (file rejected)"})
	}
	if len(p.domains) == 0 && len(p.targets) == 0 && !HasErrors(d.problems) {
		d.warnf(nil, "", "no domain and no targets")
	}
	p.problems = d.problems
	return p
}

// reject returns the result for a file rejected whole, with pr its only
// problem.
func reject(p *parsed, pr Problem) *parsed {
	pr.File, pr.Severity = p.name, Error
	return &parsed{name: p.name, hash: p.hash, rejected: true, problems: []Problem{pr}}
}

// docPrefix names the i-th YAML document of a file in paths; the first
// (usually the only) one has no prefix.
func docPrefix(i int) string {
	if i == 0 {
		return ""
	}
	return "doc[" + strconv.Itoa(i) + "]"
}

// decodeDocument reads one YAML document into p. It returns false when the
// document cannot be a policy file (a scalar or a list at the top).
func (d *decoder) decodeDocument(p *parsed, doc *yaml.Node, prefix string) bool {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind == 0 || (doc.Kind == yaml.ScalarNode && doc.Tag == "!!null") {
		return true // an empty document
	}
	fs, ok := d.fields(doc, prefix, "file rejected")
	if !ok {
		return false
	}
	var spec documentSpec
	var domainField, descriptors *field
	b := newBlock(d, "domain dropped")
	b.decode(fs, &spec, hooks{
		"domain":      func(f field) { domainField = &f; b.str(f, &spec.Domain) },
		"descriptors": func(f field) { descriptors = &f },
		"targets":     func(f field) { p.targets = append(p.targets, d.decodeTargets(f)...) },
	})
	if b.bad {
		return true
	}
	d.decodeDomain(p, prefix, spec.Domain, domainField, descriptors)
	return true
}

// decodeDomain builds the domain block of a document, if it has one.
func (d *decoder) decodeDomain(p *parsed, prefix, domain string, df, desc *field) {
	if df == nil && desc == nil {
		return
	}
	if domain == "" {
		d.errorf(nil, join(prefix, "domain"), "domain is required (descriptors dropped)")
		return
	}
	root := &Node{path: domain}
	if desc != nil {
		d.decodeDescriptors(root, desc.node, desc.path, 0)
	}
	p.domains = append(p.domains, domainDecl{root: root, path: df.path, line: df.node.Line})
}
