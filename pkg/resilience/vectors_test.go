package resilience

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience/internal/vectors"
)

var (
	hl      = vectors.H
	testNow = vectors.Now
)

const (
	std = "STD"
	itr = "INT"
)

// vector is one row of the provider-failure test vectors (section (d)
// of the research). Jitter is off: hints are exact, backoff is its upper
// bound. Where a row disagrees with the design (resilience.md), the
// design wins and the row's comment says so.
type vector struct {
	id      string
	profile string
	status  int
	tk      TransportKind
	h       http.Header
	body    string
	commit  bool
	retries int
	alt     bool
	budget  time.Duration // remaining deadline; 0 for none
	maxRetr int           // the target's num_retries when it matters

	class  Class
	action Action
	delay  time.Duration
	skip   time.Duration
	countT bool
	countP bool
	// rows 1–48: the verdict's hint, as vectors.Hints gives it.
	hinted  bool
	hint    time.Duration
	hasHint bool
}

// Bodies that the classification rows share.
const (
	rateLimitExceeded   = `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	anthropicOverloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
)

// hintVectors are rows 1–48: the verdict and the step that follow from
// each response of vectors.Hints, which gives the row's input.
var hintVectors = []vector{
	{id: "01", profile: std, class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "02", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second},
	// Row 3: a negative hint is a wait of 0; the same delay as the row's.
	{id: "03", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second},
	{id: "04", profile: std, class: ClassRate, action: ActionRetry, delay: 120 * time.Second, skip: 120 * time.Second},
	{id: "05", profile: std, class: ClassRate, action: ActionFailover, skip: 121 * time.Second},
	{id: "06", profile: std, class: ClassRate, action: ActionRetry, delay: 120 * time.Second, skip: 120 * time.Second},
	{id: "07", profile: std, class: ClassRate, action: ActionFailover, skip: 120001 * time.Millisecond},
	{id: "08", profile: std, class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "09", profile: std, class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "10", profile: std, class: ClassRate, action: ActionRetry, delay: 20 * time.Second, skip: 20 * time.Second},
	{id: "11", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second},
	{id: "12", profile: std, class: ClassRate, action: ActionFailover, skip: 121 * time.Second},
	// Rows 13, 14, 16, 17, 30, 38: an invalid hint is no hint, and per
	// resilience.md a 429 without a hint counts against the target (the
	// rows say no breaker).
	{id: "13", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "14", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "15", profile: std, class: ClassRate, action: ActionFailover, skip: MaxSkip},
	{id: "16-inf", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "16-nan", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "17", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "18", profile: std, class: ClassRate, action: ActionRetry, delay: 1500 * time.Millisecond, skip: 1500 * time.Millisecond},
	{id: "19", profile: std, class: ClassRate, action: ActionRetry, delay: 2 * time.Second, skip: 2 * time.Second},
	{id: "20", profile: std, class: ClassRate, action: ActionRetry, delay: 3 * time.Second, skip: 3 * time.Second},
	{id: "21", profile: std, class: ClassRate, action: ActionRetry, delay: 4 * time.Second, skip: 4 * time.Second},
	{id: "22", profile: std, class: ClassOverload, action: ActionRetry, delay: 3 * time.Second, skip: 3 * time.Second, countT: true, countP: true},
	{id: "23", profile: std, class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "24", profile: std, class: ClassRate, action: ActionRetry, delay: 60 * time.Second, skip: 60 * time.Second},
	{id: "25", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, skip: time.Second},
	{id: "26", profile: std, class: ClassRate, action: ActionFailover, skip: 360 * time.Second},
	{id: "27", profile: std, class: ClassRate, action: ActionRetry, delay: 20 * time.Millisecond, skip: 20 * time.Millisecond},
	{id: "28", profile: std, class: ClassRate, action: ActionRetry, delay: 8 * time.Second, skip: 8 * time.Second},
	{id: "29", profile: std, class: ClassRate, action: ActionFailover, skip: 179560 * time.Millisecond},
	{id: "30", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "31", profile: std, class: ClassRate, action: ActionRetry, delay: 10 * time.Second, skip: 10 * time.Second},
	{id: "32", profile: std, class: ClassRate, action: ActionRetry, delay: 15 * time.Second, skip: 15 * time.Second},
	{id: "33", profile: std, class: ClassRate, action: ActionRetry, delay: 26 * time.Second, skip: 26 * time.Second},
	{id: "34", profile: std, class: ClassRate, action: ActionRetry, delay: 500 * time.Millisecond, skip: 500 * time.Millisecond},
	{id: "35", profile: std, class: ClassQuota, action: ActionFailover, skip: MaxSkip},
	{id: "36", profile: std, class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "37", profile: std, class: ClassRate, action: ActionRetry, delay: 10 * time.Second, skip: 10 * time.Second},
	{id: "38", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second, countT: true},
	{id: "39", profile: std, class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "40", profile: std, class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "41", profile: std, class: ClassRate, action: ActionRetry, delay: 30 * time.Second, skip: 30 * time.Second},
	{id: "42", profile: std, class: ClassRate, action: ActionRetry, delay: time.Second},
	// Rows 43, 44: gRPC UNAVAILABLE reaches ext_proc as HTTP 503.
	{id: "43", profile: std, class: ClassOverload, action: ActionRetry, delay: 1500 * time.Millisecond, skip: 1500 * time.Millisecond, countT: true, countP: true},
	{id: "44", profile: std, class: ClassOverload, action: ActionFailover, countT: true, countP: true},
	{id: "45", profile: std, class: ClassRate, action: ActionRetry, delay: 37 * time.Second, skip: 37 * time.Second},
	{id: "46", profile: std, class: ClassRate, action: ActionFailover, skip: MaxSkip},
	{id: "47", profile: std, class: ClassRate, action: ActionRetry, delay: 41724 * time.Millisecond, skip: 41724 * time.Millisecond},
	{id: "48", profile: itr, alt: true, class: ClassRate, action: ActionFailover, skip: 41724 * time.Millisecond},
}

// TestVectorsHints runs rows 1–48 from the response to the step; the
// verdict's hint must be the one the row gives (retryhint checks the same
// hints from the headers and the body's parts).
func TestVectorsHints(t *testing.T) {
	rows := map[string]vectors.Hint{}
	for _, r := range vectors.Hints {
		rows[r.ID] = r
	}
	vs := make([]vector, 0, len(hintVectors))
	for _, v := range hintVectors {
		r, ok := rows[v.id]
		if !ok {
			t.Fatalf("row %s is not among vectors.Hints", v.id)
		}
		delete(rows, v.id)
		v.status, v.h, v.body = r.Status, r.Header, r.Body
		v.hinted, v.hint, v.hasHint = true, r.Wait, r.HasWait
		vs = append(vs, v)
	}
	if len(rows) > 0 {
		t.Fatalf("vectors.Hints rows without a verdict here: %v", rows)
	}
	runVectors(t, vs)
}

func runVectors(t *testing.T, vs []vector) {
	t.Helper()
	for _, v := range vs {
		t.Run("row"+v.id, func(t *testing.T) {
			prof := Standard()
			if v.profile == itr {
				prof = Interactive()
			}
			if v.maxRetr > 0 {
				prof.MaxRetries = v.maxRetr
			}
			p, err := NewPolicy(prof, nil)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Status: v.status, Transport: v.tk, Header: v.h, Body: []byte(v.body), Committed: v.commit, Now: testNow}
			got := Classify(in)
			a := Attempt{Retries: v.retries, Now: testNow, HasAlternative: v.alt}
			if v.budget > 0 {
				a.Deadline = testNow.Add(v.budget)
			}
			step := p.Plan(got, a)
			if got.Class != v.class || got.CountTarget != v.countT || got.CountProvider != v.countP {
				t.Errorf("verdict = class %q target %v provider %v, want %q %v %v (%+v)",
					got.Class, got.CountTarget, got.CountProvider, v.class, v.countT, v.countP, got)
			}
			if v.hinted && (got.Hint != v.hint || got.HasHint != v.hasHint) {
				t.Errorf("verdict hint = %v, %v; want %v, %v", got.Hint, got.HasHint, v.hint, v.hasHint)
			}
			if step.Action != v.action || step.Delay != v.delay || step.SkipFor != v.skip {
				t.Errorf("step = %v delay %v skip %v, want %v %v %v (verdict %+v)",
					step.Action, step.Delay, step.SkipFor, v.action, v.delay, v.skip, got)
			}
		})
	}
}
