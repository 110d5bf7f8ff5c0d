package resilience

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	gpt4o    = Target{Name: "gpt-4o", Provider: "openai", APIHost: "api.openai.com"}
	gpt4mini = Target{Name: "gpt-4o-mini", Provider: "openai", APIHost: "api.openai.com"}
	claude   = Target{Name: "claude", Provider: "anthropic"}
)

func verdictFor(status int, h http.Header) Verdict {
	return Classify(Input{Status: status, Header: h, Now: time.Now()})
}

func recordN(r *Registry, t Target, v Verdict, n int) {
	for range n {
		r.Record(t, v)
	}
}

// Row 104: five consecutive counted failures open the target breaker for
// 30 s; then one probe decides.
func TestVector104BreakerOpensAfterFiveFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		fail := verdictFor(500, nil)
		recordN(r, claude, fail, 4)
		if a := r.Allow(claude); !a.Allowed {
			t.Fatalf("after 4 failures: %+v, want allowed", a)
		}
		r.Record(claude, fail)
		opened := time.Now()
		a := r.Status(claude)
		if a.Allowed || a.Reason != SkipBreakerOpen || a.Tier != TierTarget || !a.Until.Equal(opened.Add(30*time.Second)) {
			t.Fatalf("after 5 failures: %+v, want open until +30s", a)
		}
		time.Sleep(29 * time.Second)
		if a := r.Allow(claude); a.Allowed {
			t.Fatalf("at +29s: %+v, want still open", a)
		}
		time.Sleep(time.Second + time.Millisecond)
		if a := r.Allow(claude); !a.Allowed || !a.Probe {
			t.Fatalf("at +30s: %+v, want the probe", a)
		}
		if a := r.Allow(claude); a.Allowed {
			t.Fatalf("second request while probing: %+v, want refused", a)
		}
		r.Record(claude, Verdict{})
		if a := r.Allow(claude); !a.Allowed || a.Probe {
			t.Fatalf("after a good probe: %+v, want closed", a)
		}
	})
}

// Row 105: 6 × 5xx and 4 × 200 within a minute open the target breaker.
func TestVector105MixedFailuresOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		fail := verdictFor(502, nil)
		for i := range 10 {
			if i%5 < 3 {
				r.Record(claude, fail)
			} else {
				r.Record(claude, Verdict{})
			}
			time.Sleep(5 * time.Second)
		}
		if a := r.Status(claude); a.Allowed {
			t.Fatalf("after 6 failures in a minute: %+v, want open", a)
		}
	})
}

// Row 106: twenty 429s on a single-target chain. With a hint the target
// is only skipped, never broken. The row expects no breaker at all;
// resilience.md counts a 429 without a hint against the target, so that
// case opens it.
func TestVector106ThrottlesSkipNotBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events := 0
		r := NewRegistry(WithStateChange(func(BreakerEvent) { events++ }))
		hinted := verdictFor(429, hl("Retry-After", "2"))
		for range 20 {
			r.Record(claude, hinted)
			a := r.Allow(claude)
			if a.Allowed || a.Reason != SkipRateLimited || !a.Until.Equal(time.Now().Add(2*time.Second)) {
				t.Fatalf("right after a hinted 429: %+v, want skipped for exactly 2s", a)
			}
			time.Sleep(2 * time.Second)
			if a := r.Allow(claude); !a.Allowed {
				t.Fatalf("after the hint: %+v, want allowed", a)
			}
		}
		if events != 0 {
			t.Fatalf("%d breaker events for hinted 429s, want none", events)
		}
		recordN(r, claude, verdictFor(429, nil), 5)
		if a := r.Status(claude); a.Reason != SkipBreakerOpen {
			t.Fatalf("after 5 unhinted 429s: %+v, want breaker open (resilience.md)", a)
		}
	})
}

func TestBreakerWindowForgetsOldFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		fail := verdictFor(500, nil)
		recordN(r, claude, fail, 4)
		time.Sleep(61 * time.Second)
		r.Record(claude, fail)
		if a := r.Status(claude); !a.Allowed {
			t.Fatalf("4 failures, 61 s, 1 failure: %+v, want closed", a)
		}
		recordN(r, claude, fail, 4)
		if a := r.Status(claude); a.Allowed {
			t.Fatalf("5 failures within the window: %+v, want open", a)
		}
	})
}

func TestBreakerExcludesCallerErrorsAndCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		recordN(r, claude, verdictFor(400, nil), 10)
		recordN(r, claude, Classify(Input{Transport: TransportCanceled}), 10)
		recordN(r, claude, verdictFor(409, nil), 10)
		if a := r.Status(claude); !a.Allowed {
			t.Fatalf("caller errors and cancellations: %+v, want closed", a)
		}
	})
}

func TestProviderTierNeedsTwoFailingTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		fail := verdictFor(503, nil)
		recordN(r, gpt4o, fail, 8)
		if a := r.Status(gpt4mini); !a.Allowed {
			t.Fatalf("one failing target: sibling %+v, want allowed", a)
		}
		r.Record(gpt4mini, fail)
		a := r.Status(gpt4mini)
		if a.Allowed || a.Tier != TierProvider {
			t.Fatalf("two failing targets: sibling %+v, want provider open", a)
		}
		other := Target{Name: "gpt-4.1", Provider: "openai", APIHost: "api.openai.com"}
		if a := r.Allow(other); a.Allowed || a.Tier != TierProvider {
			t.Fatalf("untouched target of the provider: %+v, want provider open", a)
		}
		if a := r.Allow(Target{Name: "gpt-eu", Provider: "openai", APIHost: "eu.api.openai.com"}); !a.Allowed {
			t.Fatalf("same provider, other host: %+v, want allowed", a)
		}
	})
}

func TestUnreportedProbeIsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		recordN(r, claude, verdictFor(500, nil), 5)
		time.Sleep(30*time.Second + time.Millisecond)
		if a := r.Allow(claude); !a.Probe {
			t.Fatalf("after the open period: %+v, want a probe", a)
		}
		probeAt := time.Now()
		a := r.Allow(claude)
		if a.Allowed || !a.Until.Equal(probeAt.Add(30*time.Second)) {
			t.Fatalf("while the probe is out: %+v, want refused until probe+30s", a)
		}
		time.Sleep(30 * time.Second)
		if a := r.Allow(claude); !a.Probe {
			t.Fatalf("probe unreported for 30 s: %+v, want a new probe", a)
		}
		r.Record(claude, verdictFor(500, nil))
		if a := r.Status(claude); a.Allowed || !a.Until.Equal(time.Now().Add(30*time.Second)) {
			t.Fatalf("failed probe: %+v, want open again for 30 s", a)
		}
	})
}

func TestReleaseReturnsProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRegistry()
		recordN(r, claude, verdictFor(500, nil), 5)
		time.Sleep(31 * time.Second)
		if a := r.Allow(claude); !a.Probe {
			t.Fatalf("want a probe, got %+v", a)
		}
		r.Release(claude)
		if a := r.Allow(claude); !a.Probe {
			t.Fatalf("after Release: %+v, want the probe again", a)
		}
	})
}

func TestStateChangeEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []BreakerEvent
		var r *Registry
		r = NewRegistry(WithStateChange(func(e BreakerEvent) {
			got = append(got, e)
			r.Status(claude) // the callback may use the registry
		}))
		recordN(r, claude, verdictFor(500, nil), 5)
		time.Sleep(31 * time.Second)
		r.Allow(claude)
		r.Record(claude, Verdict{})
		want := []struct{ from, to BreakerState }{
			{BreakerClosed, BreakerOpen}, {BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerClosed},
		}
		if len(got) != len(want) {
			t.Fatalf("events %+v, want %d", got, len(want))
		}
		for i, w := range want {
			if got[i].From != w.from || got[i].To != w.to || got[i].Tier != TierTarget || got[i].Name != "claude" {
				t.Errorf("event %d = %+v, want %v→%v", i, got[i], w.from, w.to)
			}
		}
	})
}

func TestRegistryConcurrentUse(t *testing.T) {
	r := NewRegistry()
	targets := []Target{gpt4o, gpt4mini, claude}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				tg := targets[(g+i)%len(targets)]
				if r.Allow(tg).Allowed {
					v := Verdict{}
					if i%3 == 0 {
						v = verdictFor(503, nil)
					}
					r.Record(tg, v)
				}
				r.Status(tg)
				if i%50 == 0 {
					r.Release(tg)
				}
			}
		})
	}
	wg.Wait()
}
