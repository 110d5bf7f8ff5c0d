package policy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// configMap lays files out the way a Kubernetes ConfigMap volume does:
// real files in a hidden timestamped directory, "..data" a symlink to it,
// and each visible name a symlink into "..data".
type configMap struct {
	t   *testing.T
	dir string
	gen int
}

func newConfigMap(t *testing.T, files map[string]string) *configMap {
	c := &configMap{t: t, dir: t.TempDir()}
	c.swap(files)
	return c
}

// swap publishes a new set of files atomically, as the kubelet does.
func (c *configMap) swap(files map[string]string) {
	c.t.Helper()
	c.gen++
	gen := fmt.Sprintf("..gen_%d", c.gen)
	must(c.t, os.Mkdir(filepath.Join(c.dir, gen), 0o755))
	for name, body := range files {
		must(c.t, os.WriteFile(filepath.Join(c.dir, gen, name), []byte(body), 0o644))
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	must(c.t, os.Symlink(gen, tmp))
	must(c.t, os.Rename(tmp, filepath.Join(c.dir, "..data")))
	entries, _ := os.ReadDir(c.dir)
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && e.Name()[0] != '.' {
			must(c.t, os.Remove(filepath.Join(c.dir, e.Name())))
		}
	}
	for name := range files {
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); err != nil {
			must(c.t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
	if c.gen > 1 {
		must(c.t, os.RemoveAll(filepath.Join(c.dir, fmt.Sprintf("..gen_%d", c.gen-1))))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func domainYAML(domain string, rpu int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: %d}\n", domain, rpu)
}

func rpu(s *Snapshot, domain string) int {
	if l := s.Match(domain, e("k", "v")); l != nil {
		return int(l.RequestsPerUnit)
	}
	return -1
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func TestWatcherConfigMapSwap(t *testing.T) {
	cm := newConfigMap(t, map[string]string{"a.yaml": domainYAML("a", 1), "b.yaml": domainYAML("b", 1)})
	var results []Result
	w, err := NewWatcher(cm.dir, WatcherOptions{Logger: testLogger(t), OnReload: func(r Result) { results = append(results, r) }})
	must(t, err)
	s := w.Current()
	if rpu(s, "a") != 1 || rpu(s, "b") != 1 || len(s.Files()) != 2 || len(s.Problems()) != 0 {
		t.Fatalf("initial snapshot: files %v problems %v", s.Files(), s.Problems())
	}
	if r := w.Reload(); r.Changed || r.Snapshot != s {
		t.Fatal("a reload with no change must keep the snapshot")
	}
	cm.swap(map[string]string{"a.yaml": domainYAML("a", 2), "c.yaml": domainYAML("c", 3)})
	r := w.Reload()
	if !r.Changed || r.Err != nil || w.Current() != r.Snapshot {
		t.Fatalf("swap not picked up: %+v", r)
	}
	s = w.Current()
	if rpu(s, "a") != 2 || rpu(s, "b") != -1 || rpu(s, "c") != 3 {
		t.Errorf("after swap: a=%d b=%d c=%d", rpu(s, "a"), rpu(s, "b"), rpu(s, "c"))
	}
	for _, f := range s.Files() {
		if filepath.Dir(f.Name) != cm.dir {
			t.Errorf("read through a hidden path: %s", f.Name)
		}
	}
	if len(results) != 2 || !results[1].Changed { // the initial load, then the swap
		t.Errorf("OnReload calls: %+v", results)
	}
}

func TestWatcherKeepsLastGoodFile(t *testing.T) {
	cm := newConfigMap(t, map[string]string{"a.yaml": domainYAML("a", 1), "b.yaml": domainYAML("b", 1)})
	w, err := NewWatcher(cm.dir, WatcherOptions{Logger: testLogger(t)})
	must(t, err)
	cm.swap(map[string]string{"a.yaml": "domain: [unclosed\n", "b.yaml": domainYAML("b", 2)})
	r := w.Reload()
	s := w.Current()
	if !r.Changed || rpu(s, "a") != 1 || rpu(s, "b") != 2 {
		t.Fatalf("a=%d b=%d: the broken file must keep its last good version, the other must update", rpu(s, "a"), rpu(s, "b"))
	}
	a := filepath.Join(cm.dir, "a.yaml")
	if !slices.Equal(r.Stale, []string{a}) || r.Errors() != 1 || !HasErrors(s.Problems()) {
		t.Errorf("stale %v, problems %v", r.Stale, s.Problems())
	}
	cm.swap(map[string]string{"a.yaml": domainYAML("a", 5), "b.yaml": domainYAML("b", 2)})
	r = w.Reload()
	if s := w.Current(); rpu(s, "a") != 5 || len(r.Stale) != 0 || len(s.Problems()) != 0 {
		t.Errorf("fixed file: a=%d stale=%v problems=%v", rpu(s, "a"), r.Stale, s.Problems())
	}
}

func TestWatcherBrokenNewFileAndBadBlock(t *testing.T) {
	cm := newConfigMap(t, map[string]string{"a.yaml": domainYAML("a", 1)})
	w, err := NewWatcher(cm.dir, WatcherOptions{})
	must(t, err)
	// A new file with no good version contributes nothing; a bad block in
	// a parsable file drops only that block.
	cm.swap(map[string]string{
		"a.yaml":   domainYAML("a", 1) + "  - key: j\n    rate_limit: {unit: eon, requests_per_unit: 1}\n",
		"new.yaml": "\t:\n- not yaml at all: [",
	})
	r := w.Reload()
	s := w.Current()
	if !r.Changed || rpu(s, "a") != 1 || len(r.Stale) != 0 || r.Errors() != 2 {
		t.Fatalf("a=%d stale=%v problems=%v", rpu(s, "a"), r.Stale, r.Problems)
	}
	for _, f := range s.Files() {
		if filepath.Base(f.Name) == "new.yaml" && !f.Rejected {
			t.Errorf("new.yaml should be marked rejected: %+v", f)
		}
	}
}

func TestWatcherPathErrors(t *testing.T) {
	if _, err := NewWatcher(filepath.Join(t.TempDir(), "missing"), WatcherOptions{}); err == nil {
		t.Fatal("a missing path must fail at start")
	}
	dir := filepath.Join(t.TempDir(), "policies")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(domainYAML("a", 1)), 0o644))
	var calls int
	w, err := NewWatcher(dir, WatcherOptions{OnReload: func(Result) { calls++ }})
	must(t, err)
	before := w.Current()
	must(t, os.RemoveAll(dir))
	r := w.Reload()
	if r.Err == nil || r.Changed || w.Current() != before || r.Snapshot != before || calls != 2 {
		t.Errorf("a vanished path must keep the snapshot: %+v (calls %d)", r, calls)
	}
}

// TestWatcherRun drives Run on a fake clock: a change is picked up within
// two seconds, and Run returns when its context ends.
func TestWatcherRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "a.yaml")
		must(t, os.WriteFile(file, []byte(domainYAML("a", 1)), 0o644))
		w, err := NewWatcher(dir, WatcherOptions{PollInterval: time.Second})
		must(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		must(t, os.WriteFile(file, []byte(domainYAML("a", 7)), 0o644))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := rpu(w.Current(), "a"); got != 7 {
			t.Errorf("after 2 s: a=%d", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func TestLoadLayout(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
	write("a.yaml", domainYAML("a", 1))
	write("nested/deeper/b.YML", domainYAML("b", 2))
	write(".hidden.yaml", domainYAML("hidden", 3))
	write(".hidden/c.yaml", domainYAML("hiddendir", 3))
	write("notes.txt", "not a policy")
	must(t, os.Symlink(dir, filepath.Join(dir, "nested", "loop")))           // a directory cycle
	must(t, os.Symlink("missing.yaml", filepath.Join(dir, "dangling.yaml"))) // a dangling link
	s, err := Load(dir)
	must(t, err)
	if got := s.Domains(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("domains %v", got)
	}
	if ps := s.Problems(); len(ps) != 1 || filepath.Base(ps[0].File) != "dangling.yaml" {
		t.Errorf("problems %v", ps)
	}
	one, err := Load(filepath.Join(dir, "a.yaml"))
	if err != nil || !slices.Equal(one.Domains(), []string{"a"}) {
		t.Errorf("single file: %v, %v", one.Domains(), err)
	}
}
