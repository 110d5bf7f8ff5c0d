package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"
)

// tally counts the answers and the requests admitted at once. Safe for
// concurrent use.
type tally struct {
	cap int

	mu        sync.Mutex
	answers   map[string]int
	decisions []time.Duration
	skipped   int
	open      int // admitted and not yet at their last chunk
	maxOpen   int
	overCap   int // admits that took the open count over cap

	last      map[string]int // answers at the last progress line
	lastMax   time.Duration  // slowest decision since the last progress line
	lastStart time.Time
}

func newTally(limit int) *tally {
	return &tally{cap: limit, answers: map[string]int{}, last: map[string]int{}, lastStart: time.Now()}
}

func (t *tally) add(o outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answers[o.kind]++
	if o.decision > 0 {
		t.decisions = append(t.decisions, o.decision)
		t.lastMax = max(t.lastMax, o.decision)
	}
}

func (t *tally) skip() {
	t.mu.Lock()
	t.skipped++
	t.mu.Unlock()
}

// admit counts a request let through until the returned release.
func (t *tally) admit() func() {
	t.mu.Lock()
	t.open++
	t.maxOpen = max(t.maxOpen, t.open)
	if t.cap > 0 && t.open > t.cap {
		t.overCap++
	}
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.open--
			t.mu.Unlock()
		})
	}
}

// progress prints the answers of each interval to w until the returned
// stop is called; stop waits for the printer to end.
func (t *tally) progress(every time.Duration, w io.Writer) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				fmt.Fprintln(w, t.line(now))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// line is the progress since the last line: answers by kind, the slowest
// decision and the requests open now.
func (t *tally) line(now time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	kinds := make([]string, 0, len(t.answers))
	for k := range t.answers {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	s := now.UTC().Format("15:04:05") + " soakload:"
	for _, k := range kinds {
		if n := t.answers[k] - t.last[k]; n > 0 {
			s += fmt.Sprintf(" %s=%d", k, n)
		}
		t.last[k] = t.answers[k]
	}
	s += fmt.Sprintf(" slowest_decision_ms=%.1f admitted_now=%d", float64(t.lastMax)/1e6, t.open)
	t.lastMax = 0
	return s
}

// report is the printed result.
type report struct {
	Seconds     float64        `json:"seconds"`
	Rate        float64        `json:"rate"`
	Sent        int            `json:"sent"`
	Skipped     int            `json:"skipped"`
	Answers     map[string]int `json:"answers"`
	Errors      int            `json:"errors"`
	DecisionMs  map[string]any `json:"decision_ms"`
	MaxAdmitted int            `json:"max_admitted_at_once"`
	Cap         int            `json:"cap"`
	AdmitsOver  int            `json:"admits_over_cap"`
	CPUSeconds  float64        `json:"cpu_seconds"` // this process's user+system time
}

func (t *tally) report(c config) report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := report{Seconds: c.d.Seconds(), Rate: c.rate, Skipped: t.skipped, Answers: map[string]int{},
		MaxAdmitted: t.maxOpen, Cap: t.cap, AdmitsOver: t.overCap}
	for k, n := range t.answers {
		r.Answers[k] = n
		r.Sent += n
		if len(k) > 6 && k[:6] == "error " {
			r.Errors += n
		}
	}
	d := slices.Clone(t.decisions)
	slices.Sort(d)
	ms := func(q float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[int(q*float64(len(d)-1))]) / 1e6
	}
	r.DecisionMs = map[string]any{"p50": ms(0.5), "p99": ms(0.99), "p999": ms(0.999), "max": ms(1)}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return r
}
