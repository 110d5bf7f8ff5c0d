package policy

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPollInterval is how often a Watcher looks for changes.
const DefaultPollInterval = time.Second

// WatcherOptions configures a Watcher. The zero value is usable.
type WatcherOptions struct {
	// Logger receives reload outcomes and problems; nil discards them.
	Logger *slog.Logger
	// PollInterval between checks; zero means DefaultPollInterval.
	PollInterval time.Duration
	// OnReload, when set, is called after every load that found a change
	// or failed (not after polls that found nothing new), from the
	// goroutine that ran it, with the Watcher's lock held: it must not
	// call Reload. Use it for metrics.
	OnReload func(Result)
	// Load applies to every snapshot the Watcher builds.
	Load LoadOptions
}

// Result is the outcome of one load.
type Result struct {
	// Snapshot is current after the load (the previous one on failure).
	Snapshot *Snapshot
	// Changed is set when a new snapshot was published.
	Changed bool
	// Err is set when the policy path itself could not be read; the
	// previous snapshot stays current.
	Err error
	// Problems are the new snapshot's problems.
	Problems []Problem
	// Stale lists files whose new content was rejected or unreadable and
	// whose last good version is kept.
	Stale []string
	// Duration is how long the load took.
	Duration time.Duration
}

// Errors counts the Error problems.
func (r Result) Errors() int {
	n := 0
	for _, p := range r.Problems {
		if p.Severity == Error {
			n++
		}
	}
	return n
}

// Watcher keeps a current Snapshot of a policy path, reloading it when
// files change. Changes are found by polling content hashes, which sees
// edits, new and removed files and ConfigMap symlink swaps alike. Current
// is safe for concurrent use and never blocks; Run and Reload serialise
// loads between themselves.
type Watcher struct {
	opts    WatcherOptions
	log     *slog.Logger
	mu      sync.Mutex // serialises loads
	loader  *loader
	lastErr string
	cur     atomic.Pointer[Snapshot]
}

// NewWatcher loads path once and returns a Watcher holding the result.
// It fails only when path cannot be read at all.
func NewWatcher(path string, opts WatcherOptions) (*Watcher, error) {
	w := &Watcher{opts: opts, log: opts.Logger, loader: newLoader(path)}
	w.loader.opts = opts.Load
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.opts.PollInterval <= 0 {
		w.opts.PollInterval = DefaultPollInterval
	}
	if r := w.Reload(); r.Err != nil {
		return nil, r.Err
	}
	return w, nil
}

// Current returns the current snapshot (never nil after NewWatcher).
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// Run polls for changes until ctx ends, then returns nil.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.Reload()
		}
	}
}

// Reload checks the path once now and publishes a new snapshot if any
// file changed. Run calls it on every tick; tests and admin endpoints may
// call it directly.
func (w *Watcher) Reload() Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := time.Now()
	snap, changed, err := w.loader.load()
	r := Result{Snapshot: snap, Changed: changed, Err: err, Duration: time.Since(start)}
	if err != nil {
		w.logError(err)
	} else {
		w.lastErr = ""
	}
	if !changed && err == nil {
		return r
	}
	if changed {
		r.Problems = snap.Problems()
		for _, f := range snap.Files() {
			if f.Stale {
				r.Stale = append(r.Stale, f.Name)
			}
		}
		w.cur.Store(snap)
		w.logReload(r)
	}
	if w.opts.OnReload != nil {
		w.opts.OnReload(r)
	}
	return r
}

func (w *Watcher) logError(err error) {
	if err.Error() == w.lastErr {
		return // logged already; stay quiet until it changes
	}
	w.lastErr = err.Error()
	w.log.Error("policy load failed; keeping the current policies", "path", w.loader.path, "error", err)
}

func (w *Watcher) logReload(r Result) {
	w.log.Info("policies loaded", "path", w.loader.path, "version", r.Snapshot.Version(),
		"files", len(r.Snapshot.Files()), "domains", len(r.Snapshot.domains),
		"targets", len(r.Snapshot.list), "errors", r.Errors(), "stale", r.Stale)
	for _, p := range r.Problems {
		lvl := slog.LevelInfo
		if p.Severity == Error {
			lvl = slog.LevelWarn
		}
		w.log.Log(context.Background(), lvl, "policy problem", "problem", p.String(), "line", p.Line)
	}
}
