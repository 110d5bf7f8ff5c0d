package resilience

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestExpandDepthFirstWithCycles(t *testing.T) {
	graph := map[string][]string{
		"a": {"b", "c"},
		"b": {"d", "a"}, // cycle back to a
		"c": {"b", "e"},
		"e": {"c"},
	}
	got := Expand("a", func(t string) []string { return graph[t] })
	if want := []string{"a", "b", "d", "c", "e"}; !slices.Equal(got, want) {
		t.Fatalf("Expand = %v, want %v", got, want)
	}
	if got := Expand("x", nil); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("no fallbacks: %v", got)
	}
}

func TestExpandAtMostFivePerTarget(t *testing.T) {
	got := Expand("r", func(t string) []string {
		if t == "r" {
			return []string{"1", "2", "3", "4", "5", "6", "7"}
		}
		return nil
	})
	if want := []string{"r", "1", "2", "3", "4", "5"}; !slices.Equal(got, want) {
		t.Fatalf("Expand = %v, want %v", got, want)
	}
}

func checks(results map[string]HopResult) func(context.Context, string) HopResult {
	return func(_ context.Context, hop string) HopResult { return results[hop] }
}

func TestWalkServesFirstEligibleHop(t *testing.T) {
	res := Walk(t.Context(), []string{"a", "b", "c", "d"}, checks(map[string]HopResult{
		"a": Skipped(SkipBreakerOpen), "b": RateLimited(time.Second), "c": Served(), "d": Served(),
	}))
	if res.Outcome != OutcomeServed || res.Hop != "c" || len(res.Hops) != 3 || res.Err != nil {
		t.Fatalf("walk = %+v, want served by c after 3 hops", res)
	}
	if res.Hops[0].Reason != SkipBreakerOpen || res.Hops[1].Reason != SkipRateLimited {
		t.Fatalf("hop reasons = %+v", res.Hops)
	}
}

func TestWalkAllRateLimitedGivesSmallestWait(t *testing.T) {
	res := Walk(t.Context(), []string{"a", "b", "c"}, checks(map[string]HopResult{
		"a": RateLimited(3 * time.Second), "b": RateLimited(1500 * time.Millisecond), "c": RateLimited(2 * time.Second),
	}))
	if res.Outcome != OutcomeExhausted || !res.HasWait || res.Wait != 1500*time.Millisecond || !errors.Is(res.Err, ErrChainExhausted) {
		t.Fatalf("walk = %+v, want exhausted with wait 1.5s", res)
	}
	res = Walk(t.Context(), []string{"a", "b"}, checks(map[string]HopResult{
		"a": RateLimited(time.Second), "b": Skipped(SkipConcurrencyLimited),
	}))
	if res.HasWait {
		t.Fatalf("mixed skips: %+v, want no wait", res)
	}
}

// Row 103: every hop fails (each after its own retries); the chain is
// exhausted and reports the first and the last failure.
func TestVector103ChainExhausted(t *testing.T) {
	hops := []string{"t1", "t2", "t3", "t4", "t5"}
	errs := map[string]HopResult{}
	for _, h := range hops {
		errs[h] = Failed(errors.New(h + ": 503"))
	}
	res := Walk(t.Context(), hops, checks(errs))
	if res.Outcome != OutcomeExhausted || res.FirstFailure.Target != "t1" || res.LastFailure.Target != "t5" {
		t.Fatalf("walk = %+v, want exhausted t1…t5", res)
	}
	if !errors.Is(res.Err, ErrChainExhausted) || !errors.Is(res.Err, res.LastFailure.Err) || res.HasWait {
		t.Fatalf("err = %v, want ErrChainExhausted wrapping t5's error", res.Err)
	}
}

// Row 75: a context-length failure fails over only to a hop with a larger
// window; when none exists every hop is ineligible and the caller gets
// the upstream error.
func TestVector75NoLargerContext(t *testing.T) {
	upstream := errors.New("400 prompt is too long")
	res := Walk(t.Context(), []string{"claude", "small-a", "small-b"}, checks(map[string]HopResult{
		"claude": Failed(upstream), "small-a": Skipped(SkipIneligible), "small-b": Skipped(SkipIneligible),
	}))
	if res.Outcome != OutcomeExhausted || !errors.Is(res.Err, upstream) {
		t.Fatalf("walk = %+v, want exhausted with the upstream error", res)
	}
}

func TestWalkStopsOnCallerError(t *testing.T) {
	bad := errors.New("400 invalid temperature")
	res := Walk(t.Context(), []string{"a", "b"}, checks(map[string]HopResult{"a": CallerFailed(bad), "b": Served()}))
	if res.Outcome != OutcomeCallerError || !errors.Is(res.Err, bad) || len(res.Hops) != 1 {
		t.Fatalf("walk = %+v, want the caller's error at a", res)
	}
}

func TestWalkDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	res := Walk(ctx, []string{"a", "b", "c"}, func(_ context.Context, hop string) HopResult {
		if hop == "a" {
			cancel()
		}
		return Failed(errors.New(hop))
	})
	if res.Outcome != OutcomeDeadline || !errors.Is(res.Err, ErrChainDeadline) || !errors.Is(res.Err, context.Canceled) || len(res.Hops) != 1 {
		t.Fatalf("walk = %+v, want deadline after hop a", res)
	}
}

func TestWalkEmpty(t *testing.T) {
	if res := Walk(t.Context(), nil, nil); res.Outcome != OutcomeExhausted || res.HasWait {
		t.Fatalf("empty walk = %+v", res)
	}
}
