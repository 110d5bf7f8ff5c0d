package policy

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxDirDepth bounds directory recursion below a policy directory.
const maxDirDepth = 16

// Load reads the policies at path: one file, or every *.yaml and *.yml
// file below a directory, recursively. Names starting with a dot are
// skipped, which is what a Kubernetes ConfigMap volume needs: it mounts
// each key as a visible symlink into a hidden "..data" directory, so the
// visible names are read (symlinks followed) and the hidden copies are
// not read twice.
//
// The error is non-nil only when path itself cannot be read; problems in
// the files are in the snapshot's Problems.
func Load(path string) (*Snapshot, error) { return LoadWith(path, LoadOptions{}) }

// LoadWith is Load with load options.
func LoadWith(path string, opts LoadOptions) (*Snapshot, error) {
	l := newLoader(path)
	l.opts = opts
	s, _, err := l.load()
	return s, err
}

// listing is the content of a policy tree at one moment.
type listing struct {
	files      []File
	unreadable map[string]error // listed, but could not be read
}

// readTree lists and reads the policy files at root.
func readTree(root string) (*listing, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	ls := &listing{unreadable: map[string]error{}}
	if !st.IsDir() {
		data, err := os.ReadFile(root)
		if err != nil {
			return nil, err
		}
		ls.files = append(ls.files, File{Name: root, Data: data})
		return ls, nil
	}
	if _, err := os.ReadDir(root); err != nil {
		return nil, err
	}
	ls.walk(root, 0, map[string]bool{})
	return ls, nil
}

func (ls *listing) walk(dir string, depth int, visited map[string]bool) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil || visited[real] || depth > maxDirDepth {
		return
	}
	visited[real] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		ls.unreadable[dir] = err
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		full := filepath.Join(dir, e.Name())
		info, err := os.Stat(full) // follows symlinks
		switch {
		case err != nil:
			if isPolicyName(full) {
				ls.unreadable[full] = err
			}
		case info.IsDir():
			ls.walk(full, depth+1, visited)
		case info.Mode().IsRegular() && isPolicyName(full):
			ls.read(full)
		}
	}
}

func (ls *listing) read(name string) {
	data, err := os.ReadFile(name)
	if err != nil {
		ls.unreadable[name] = err
		return
	}
	ls.files = append(ls.files, File{Name: name, Data: data})
}

func isPolicyName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// loader turns successive readings of one path into snapshots, reusing
// the parse of unchanged files and keeping the last good version of a
// file whose new content is rejected or unreadable.
type loader struct {
	path  string
	seen  map[string][sha256.Size]byte // content hash per file at the last load
	cache map[string]*parsed           // parse of each file's current content
	good  map[string]*parsed           // last accepted parse per file
	last  *Snapshot
	opts  LoadOptions
}

func newLoader(path string) *loader {
	return &loader{path: path, seen: map[string][sha256.Size]byte{},
		cache: map[string]*parsed{}, good: map[string]*parsed{}}
}

// load reads the tree; changed is false when nothing changed since the
// last load (the last snapshot is returned).
func (l *loader) load() (*Snapshot, bool, error) {
	ls, err := readTree(l.path)
	if err != nil {
		return l.last, false, err
	}
	seen := make(map[string][sha256.Size]byte, len(ls.files)+len(ls.unreadable))
	for _, f := range ls.files {
		seen[f.Name] = sha256.Sum256(f.Data)
	}
	for name := range ls.unreadable {
		seen[name] = [sha256.Size]byte{} // an unreadable file changes nothing until it is readable
	}
	if l.last != nil && sameHashes(seen, l.seen) {
		return l.last, false, nil
	}
	l.last, l.seen = l.build(ls, seen), seen
	return l.last, true, nil
}

func (l *loader) build(ls *listing, seen map[string][sha256.Size]byte) *Snapshot {
	var ps []*parsed
	var extra []Problem
	stale := map[string]bool{}
	cache := map[string]*parsed{}
	for _, f := range ls.files {
		p := l.cache[f.Name]
		if p == nil || p.hash != seen[f.Name] {
			p = parseFile(f)
		}
		cache[f.Name] = p
		if !p.rejected {
			l.good[f.Name] = p
		} else if g := l.good[f.Name]; g != nil {
			extra = append(extra, p.problems...)
			extra = append(extra, keepNote(f.Name))
			stale[f.Name], p = true, g
		}
		ps = append(ps, p)
	}
	for name, err := range ls.unreadable {
		extra = append(extra, Problem{File: name, Message: fmt.Sprintf("cannot read: %v", err), Severity: Error})
		if g := l.good[name]; g != nil {
			extra = append(extra, keepNote(name))
			stale[name] = true
			ps = append(ps, g)
		}
	}
	for name := range l.good {
		if _, ok := seen[name]; !ok {
			delete(l.good, name) // the file is gone: forget it
		}
	}
	l.cache = cache
	return assembleWith(ps, stale, extra, l.opts)
}

func keepNote(name string) Problem {
	return Problem{File: name, Message: "keeping the last good version of this file", Severity: Warning}
}

func sameHashes(a, b map[string][sha256.Size]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
