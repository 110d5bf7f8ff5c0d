package resilience

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

var errUpstream = errors.New("upstream 503")

func mustPolicy(t *testing.T, p Profile, rnd func() float64) *Policy {
	t.Helper()
	pol, err := NewPolicy(p, rnd)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// failing returns an op that fails n times with v, then succeeds.
func failing(n int, v Verdict, calls *int) func(context.Context) error {
	return func(context.Context) error {
		*calls++
		if *calls <= n {
			return WithVerdict(errUpstream, v)
		}
		return nil
	}
}

func TestRetryBacksOffThenSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls, start := 0, time.Now()
		err := Retry(t.Context(), mustPolicy(t, Standard(), nil), failing(2, effServer.verdict(), &calls))
		if err != nil || calls != 3 {
			t.Fatalf("err %v after %d calls, want success on call 3", err, calls)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Fatalf("waited %v, want 1s + 2s", got)
		}
	})
}

func TestRetryHonoursHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := Classify(Input{Status: 429, Header: hl("Retry-After", "5"), Now: time.Now()})
		calls, start := 0, time.Now()
		if err := Retry(t.Context(), mustPolicy(t, Standard(), nil), failing(1, v, &calls)); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Fatalf("waited %v, want the 5s hint", got)
		}
	})
}

func TestRetryStopsBeforeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		calls, start := 0, time.Now()
		err := Retry(ctx, mustPolicy(t, Standard(), nil), failing(5, effServer.verdict(), &calls))
		if !errors.Is(err, ErrDeadline) || !errors.Is(err, errUpstream) {
			t.Fatalf("err = %v, want ErrDeadline wrapping the upstream error", err)
		}
		if calls != 2 || time.Since(start) != time.Second {
			t.Fatalf("%d calls in %v, want 2 calls in 1s (the 2s wait would pass the deadline)", calls, time.Since(start))
		}
	})
}

func TestRetryCancelledDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(300 * time.Millisecond)
			cancel()
		}()
		calls := 0
		err := Retry(ctx, mustPolicy(t, Standard(), nil), failing(5, effServer.verdict(), &calls))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errUpstream) || calls != 1 {
			t.Fatalf("err = %v after %d calls, want Canceled after 1", err, calls)
		}
	})
}

func TestRetryDoesNotRetryCallerErrors(t *testing.T) {
	calls := 0
	err := Retry(t.Context(), mustPolicy(t, Standard(), nil), failing(5, effClient.verdict(), &calls))
	if !errors.Is(err, errUpstream) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want the error after 1", err, calls)
	}
}

func TestRetryAtMostMaxRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Standard()
		p.MaxRetries = MaxRetries
		calls := 0
		err := Retry(t.Context(), mustPolicy(t, p, nil), failing(100, effServer.verdict(), &calls))
		if err == nil || calls != MaxRetries+1 {
			t.Fatalf("err = %v after %d calls, want failure after %d", err, calls, MaxRetries+1)
		}
	})
}

func TestRetryPlainErrorsAreTransient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := Retry(t.Context(), mustPolicy(t, Interactive(), nil), func(context.Context) error {
			calls++
			return errUpstream
		})
		if !errors.Is(err, errUpstream) || calls != 2 {
			t.Fatalf("err = %v after %d calls, want 2 calls (1 interactive retry)", err, calls)
		}
	})
}

func TestProfileValidate(t *testing.T) {
	bad := []Profile{
		{Name: "zero"},
		{Name: "cap", Base: time.Second, Cap: time.Millisecond},
		{Name: "retries", Base: time.Second, Cap: time.Second, MaxRetries: MaxRetries + 1},
		{Name: "neg", Base: time.Second, Cap: time.Second, MaxRetries: -1},
	}
	for _, p := range bad {
		if _, err := NewPolicy(p, nil); !errors.Is(err, ErrInvalidProfile) {
			t.Errorf("%s: err = %v, want ErrInvalidProfile", p.Name, err)
		}
	}
	for _, p := range []Profile{Standard(), Interactive()} {
		if err := p.Validate(); err != nil {
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
		d, ok := s.Delay(0, hint, true)
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
