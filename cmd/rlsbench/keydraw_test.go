package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
)

func TestKeyDrawUniformIsNil(t *testing.T) {
	if d := newKeyDraw(0, 10, 1, 0); d != nil {
		t.Errorf("newKeyDraw(0, ...) = %v, want nil (keys in turn)", d)
	}
}

// zipfShares returns the probability of each key index under a Zipf law
// with exponent s over keys indexes.
func zipfShares(s float64, keys int) []float64 {
	p := make([]float64, keys)
	var sum float64
	for k := range p {
		p[k] = math.Pow(float64(k+1), -s)
		sum += p[k]
	}
	for k := range p {
		p[k] /= sum
	}
	return p
}

func TestKeyDrawFollowsZipf(t *testing.T) {
	const s, keys, n = 2.0, 50, 200_000
	d := newKeyDraw(s, keys, 1, 0)
	counts := make([]int, keys)
	for range n {
		k := d.next()
		if k < 0 || k >= keys {
			t.Fatalf("drew key %d, outside 0..%d", k, keys-1)
		}
		counts[k]++
	}
	want := zipfShares(s, keys)
	for k := range 5 {
		got := float64(counts[k]) / n
		// Five standard deviations of a binomial share.
		tol := 5 * math.Sqrt(want[k]*(1-want[k])/n)
		if math.Abs(got-want[k]) > tol {
			t.Errorf("key %d drawn %.4f of the time, want %.4f ± %.4f", k, got, want[k], tol)
		}
	}
	if !(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > counts[9]) {
		t.Errorf("counts of keys 0, 1, 2, 9 = %d %d %d %d, want them decreasing", counts[0], counts[1], counts[2], counts[9])
	}
}

func TestKeyDrawDeterministicPerWorker(t *testing.T) {
	draw := func(seed uint64, worker int) []int {
		d := newKeyDraw(1.1, 1000, seed, worker)
		out := make([]int, 200)
		for i := range out {
			out[i] = d.next()
		}
		return out
	}
	a := draw(5, 3)
	if b := draw(5, 3); !slices.Equal(a, b) {
		t.Errorf("same seed and worker drew\n%v\nthen\n%v", a, b)
	}
	if b := draw(5, 4); slices.Equal(a, b) {
		t.Error("workers 3 and 4 drew the same keys; want a stream each")
	}
	if b := draw(6, 3); slices.Equal(a, b) {
		t.Error("seeds 5 and 6 drew the same keys")
	}
}

func TestZipfRun(t *testing.T) {
	const keys, n = 50, 2000
	addr, srv := startRLS(t, allowAll)
	rep := benchJSON(t, "-addr", addr, "-n", fmt.Sprint(n), "-c", "1", "-keys", fmt.Sprint(keys), "-zipf", "2", "-seed", "7")
	calls, perKey, _ := srv.snapshot()
	if calls != n || rep.Requests != n || rep.Config.Zipf != 2 || rep.Config.Seed != 7 {
		t.Fatalf("calls %d requests %d zipf %g seed %d, want %d, %d, 2, 7", calls, rep.Requests, rep.Config.Zipf, rep.Config.Seed, n, n)
	}
	for key := range perKey {
		var k int
		if _, err := fmt.Sscanf(key, "api_key=%d", &k); err != nil || k < 0 || k >= keys {
			t.Errorf("server saw key %q, outside api_key=0..%d", key, keys-1)
		}
	}
	// Key 0 takes about 62% (in turn it would be 2%).
	share0 := zipfShares(2, keys)[0]
	if got := float64(perKey["api_key=0"]) / n; math.Abs(got-share0) > 0.06 {
		t.Errorf("key 0 sent %.3f of the time, want about %.3f", got, share0)
	}

	// One worker and the same seed send the same keys again; another
	// seed does not.
	addr2, srv2 := startRLS(t, allowAll)
	benchJSON(t, "-addr", addr2, "-n", fmt.Sprint(n), "-c", "1", "-keys", fmt.Sprint(keys), "-zipf", "2", "-seed", "7")
	if _, again, _ := srv2.snapshot(); !maps.Equal(perKey, again) {
		t.Errorf("same seed, different keys sent:\n%v\n%v", perKey, again)
	}
	addr3, srv3 := startRLS(t, allowAll)
	benchJSON(t, "-addr", addr3, "-n", fmt.Sprint(n), "-c", "1", "-keys", fmt.Sprint(keys), "-zipf", "2", "-seed", "8")
	if _, other, _ := srv3.snapshot(); maps.Equal(perKey, other) {
		t.Errorf("seeds 7 and 8 sent the same keys: %v", other)
	}
}
