package resilience

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustPolicy(t *testing.T, p Profile, rnd func() float64) *Policy {
	t.Helper()
	pol, err := NewPolicy(p, rnd)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// The steps a target sees when it keeps failing with a server error:
// backoff 1 s, then 2 s, then the budget of 2 retries is spent.
func TestPlanBacksOffThenFailsOver(t *testing.T) {
	p := mustPolicy(t, Standard(), nil)
	v := effServer.verdict()
	want := []Step{{Action: ActionRetry, Delay: time.Second}, {Action: ActionRetry, Delay: 2 * time.Second}, {Action: ActionFailover}}
	for retries, w := range want {
		if got := p.Plan(v, Attempt{Retries: retries, Now: testNow}); got != w {
			t.Errorf("retries %d: step %+v, want %+v", retries, got, w)
		}
	}
	v.Failover = false
	if got := p.Plan(v, Attempt{Retries: 2, Now: testNow}); got.Action != ActionFail {
		t.Errorf("spent budget without failover: %+v, want fail", got)
	}
}

func TestPlanStopsBeforeDeadline(t *testing.T) {
	p := mustPolicy(t, Standard(), nil)
	a := Attempt{Retries: 1, Now: testNow, Deadline: testNow.Add(1500 * time.Millisecond)}
	if got := p.Plan(effServer.verdict(), a); got.Action != ActionFailover || got.Delay != 0 {
		t.Fatalf("the 2 s backoff passes the deadline: %+v, want failover", got)
	}
	a.Deadline = testNow.Add(2 * time.Second)
	if got := p.Plan(effServer.verdict(), a); got.Action != ActionRetry || got.Delay != 2*time.Second {
		t.Fatalf("the 2 s backoff ends at the deadline: %+v, want retry", got)
	}
	// A hint the deadline cannot wait for becomes a skip of that length.
	v := Classify(Input{Status: 429, Header: hl("Retry-After", "5"), Now: testNow})
	a = Attempt{Now: testNow, Deadline: testNow.Add(4 * time.Second)}
	if got := p.Plan(v, a); got.Action != ActionFailover || got.SkipFor != 5*time.Second {
		t.Fatalf("5 s hint, 4 s left: %+v, want failover and a 5 s skip", got)
	}
}

func TestPlanCallerErrorsAndCommittedBytes(t *testing.T) {
	p := mustPolicy(t, Standard(), nil)
	if got := p.Plan(effClient.verdict(), Attempt{Now: testNow}); got.Action != ActionFail {
		t.Errorf("caller error: %+v, want fail", got)
	}
	v := effServer.verdict()
	v.Committed = true
	if got := p.Plan(v, Attempt{Now: testNow}); got.Action != ActionAbort {
		t.Errorf("committed: %+v, want abort", got)
	}
	if got := p.Plan(Verdict{}, Attempt{Now: testNow}); got != (Step{}) {
		t.Errorf("success: %+v, want the zero step", got)
	}
}

func TestPlanAtMostMaxRetries(t *testing.T) {
	prof := Standard()
	prof.MaxRetries = MaxRetries
	p := mustPolicy(t, prof, nil)
	for retries := range MaxRetries {
		if got := p.Plan(effServer.verdict(), Attempt{Retries: retries, Now: testNow}); got.Action != ActionRetry {
			t.Fatalf("retries %d: %+v, want retry", retries, got)
		}
	}
	if got := p.Plan(effServer.verdict(), Attempt{Retries: MaxRetries, Now: testNow}); got.Action != ActionFailover {
		t.Fatalf("retries %d: %+v, want failover", MaxRetries, got)
	}
}

func TestProfileValidate(t *testing.T) {
	bad := []struct {
		p     Profile
		field string
	}{
		{Profile{Name: "zero"}, "base"},
		{Profile{Name: "cap", Base: time.Second, Cap: time.Millisecond}, "cap"},
		{Profile{Name: "hint", Base: time.Second, Cap: time.Second, MaxHintWait: -1}, "max hint wait"},
		{Profile{Name: "retries", Base: time.Second, Cap: time.Second, MaxRetries: MaxRetries + 1}, "max retries"},
		{Profile{Name: "neg", Base: time.Second, Cap: time.Second, MaxRetries: -1}, "max retries"},
		{Profile{Name: "jitter", Base: time.Second, Cap: time.Second, Jitter: JitterFull + 1}, "jitter"},
	}
	for _, b := range bad {
		_, err := NewPolicy(b.p, nil)
		if err == nil || !strings.Contains(err.Error(), b.field) || !strings.Contains(err.Error(), b.p.Name) {
			t.Errorf("%s: err = %v, want one naming the profile and %s", b.p.Name, err, b.field)
		}
	}
	for _, p := range []Profile{Standard(), Interactive()} {
		if _, err := NewPolicy(p, nil); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

func TestBackoffUpperBounds(t *testing.T) {
	s, i := mustPolicy(t, Standard(), nil), mustPolicy(t, Interactive(), nil)
	want := []struct{ std, itr time.Duration }{
		{time.Second, 250 * time.Millisecond}, {2 * time.Second, 500 * time.Millisecond},
		{4 * time.Second, time.Second}, {8 * time.Second, 2 * time.Second},
		{10 * time.Second, 4 * time.Second}, {10 * time.Second, 8 * time.Second}, {10 * time.Second, 8 * time.Second},
	}
	for n, w := range want {
		if got := s.Backoff(n); got != w.std {
			t.Errorf("standard backoff(%d) = %v, want %v", n, got, w.std)
		}
		if got := i.Backoff(n); got != w.itr {
			t.Errorf("interactive backoff(%d) = %v, want %v", n, got, w.itr)
		}
	}
	if got := s.Backoff(1 << 20); got != 10*time.Second {
		t.Errorf("huge attempt: %v, want the cap", got)
	}
}

// Jitter stays within its documented range for any random value.
func TestJitterRanges(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	s := mustPolicy(t, Standard(), rnd.Float64)
	i := mustPolicy(t, Interactive(), rnd.Float64)
	for n := range 2000 {
		retries := n % 6
		upS, upI := mustPolicy(t, Standard(), nil).Backoff(retries), mustPolicy(t, Interactive(), nil).Backoff(retries)
		if d := s.Backoff(retries); d <= upS*3/4 || d > upS {
			t.Fatalf("standard backoff %v outside (¾·%v, %v]", d, upS, upS)
		}
		if d := i.Backoff(retries); d <= 0 || d > upI {
			t.Fatalf("interactive backoff %v outside (0, %v]", d, upI)
		}
		hint := time.Duration(n+1) * 3 * time.Millisecond
		d, ok := s.delay(0, hint, true)
		if !ok || d < hint || d >= hint+hint/10+1 {
			t.Fatalf("hint %v gave %v, want within [h, 1.1h)", hint, d)
		}
	}
	broken := mustPolicy(t, Standard(), func() float64 { return 7 })
	if d := broken.Backoff(0); d != time.Second {
		t.Fatalf("out-of-range random value gave %v, want it ignored", d)
	}
}

func TestPlanLongHintNeverShortened(t *testing.T) {
	p := mustPolicy(t, Interactive(), nil)
	v := Verdict{Class: ClassRate, Retry: true, Failover: true, Hint: 9 * time.Second, HasHint: true}
	step := p.Plan(v, Attempt{Now: testNow})
	if step.Action != ActionFailover || step.SkipFor != 9*time.Second {
		t.Fatalf("9 s hint on interactive: %+v, want failover and a 9 s skip", step)
	}
	v.Failover = false
	if step := p.Plan(v, Attempt{Now: testNow}); step.Action != ActionFail || step.SkipFor != 9*time.Second {
		t.Fatalf("no failover allowed: %+v, want fail with the skip", step)
	}
}
