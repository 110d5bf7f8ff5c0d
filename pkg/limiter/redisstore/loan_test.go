package redisstore_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/redisstore"
)

// TestLoanFieldApart: a loan is kept in a field of its own (l:<id>), and
// the replica's share record reads as it did before loans, so a script
// of an earlier release, beside this one in a rolling update, reads the
// key rather than fail on it.
func TestLoanFieldApart(t *testing.T) {
	client := redistest.Start(t).Client(t)
	st := redisstore.New(client, newService())
	w := limiter.Window{Limit: 100, Period: time.Hour}
	it := limiter.SyncItem{Key: "k", Algorithm: limiter.FixedWindow, Windows: []limiter.Window{w}, Share: 1, Replicas: 2,
		Lease: time.Second, Sharers: 2, SharersNext: 2, Gone: []string{"b"}, Borrow: true}
	it.ShareEpoch = time.Now().Unix() / 3600
	out := make([]limiter.SyncResult, 1)
	if err := st.Sync(context.Background(), "j", []limiter.SyncItem{it}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Lent != 50 || out[0].Now/int64(time.Hour/time.Microsecond) != it.ShareEpoch {
		t.Skipf("lent %d at %d: the hour turned between the item and the sync", out[0].Lent, out[0].Now)
	}
	it.Borrow, it.Lent = false, 50
	it.ShareHits = []limiter.Hit{{At: out[0].Now, N: 3}}
	if err := st.Sync(context.Background(), "j", []limiter.SyncItem{it}, out); err != nil {
		t.Fatal(err)
	}
	h, err := client.HGetAll(context.Background(), st.RateKey("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("50 %d", it.ShareEpoch); h["l:j"] != want {
		t.Errorf("loan field %q, want %q (fields %v)", h["l:j"], want, h)
	}
	if !regexp.MustCompile(`^-?\d+ \d+ \d+ -?\d+ -?\d+$`).MatchString(h["s:j"]) {
		t.Errorf("share record %q is not of the five fields an earlier script reads", h["s:j"])
	}
}

// TestShrinkFieldApart: a shrink is kept in a field of its own (k:<id>),
// beside a share record that reads as before, for the same reason.
func TestShrinkFieldApart(t *testing.T) {
	client := redistest.Start(t).Client(t)
	st := redisstore.New(client, newService())
	w := limiter.Window{Limit: 100, Period: time.Hour}
	it := limiter.SyncItem{Key: "k", Algorithm: limiter.FixedWindow, Windows: []limiter.Window{w}, Share: 1, Replicas: 4,
		Lease: time.Second, Sharers: 2, SharersNext: 2, Shrink: 4}
	it.ShareEpoch = time.Now().Unix() / 3600
	out := make([]limiter.SyncResult, 1)
	if err := st.Sync(context.Background(), "a", []limiter.SyncItem{it}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Now/int64(time.Hour/time.Microsecond) != it.ShareEpoch {
		t.Skipf("the hour turned between the item and the sync (%d)", out[0].Now)
	}
	h, err := client.HGetAll(context.Background(), st.RateKey("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("4 %d", it.ShareEpoch); h["k:a"] != want {
		t.Errorf("shrink field %q, want %q (fields %v)", h["k:a"], want, h)
	}
	if !regexp.MustCompile(`^-?\d+ \d+ \d+ -?\d+ -?\d+$`).MatchString(h["s:a"]) {
		t.Errorf("share record %q is not of the five fields an earlier script reads", h["s:a"])
	}
	if out[0].Others != 50 {
		t.Errorf("others %d, want b's share of 50 (a's shrunk to 25 is its own)", out[0].Others)
	}
}
