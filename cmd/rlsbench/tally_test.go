package main

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestAccuracyTable(t *testing.T) {
	a := newAccuracy(100, 2)
	w0, w1 := a.local(0), a.local(1)

	// Second 100: key 1 offered 3 (2 admitted, 1 denied), key 2 offered 2
	// (1 denied, 1 failed).
	w0.add(100, 100, 0, 1, admitted)
	w0.add(100, 100, 0, 1, denied)
	w1.add(100, 100, 0, 1, admitted)
	w1.add(100, 100, 0, 2, denied)
	w1.add(100, 100, 0, 2, failed)
	// Second 101: key 2 admitted 3 times over both workers.
	w0.add(101, 101, 0, 2, admitted)
	if got := rowsNow(a); len(got) != 0 {
		t.Fatalf("second 100 final while worker 1 may still add to it: %+v", got)
	}
	w1.add(101, 101, 0, 2, admitted)
	w1.add(101, 101, 0, 2, admitted)
	if got := rowsNow(a); len(got) != 1 || got[0].Unix != 100 {
		t.Fatalf("after both workers moved on, final rows %+v, want second 100", got)
	}
	// Worker 1 skips to second 103; second 102 has no traffic.
	w1.add(103, 103, 0, 7, admitted)
	w0.done()
	w1.done()

	want := []secondRow{
		{Unix: 100, Offset: 0, Offered: 5, Admitted: 2, OverLimit: 2, Keys: 2, MaxKeyAdmitted: 2, MaxKey: 1},
		{Unix: 101, Offset: 1, Offered: 3, Admitted: 3, Keys: 1, MaxKeyAdmitted: 3, MaxKey: 2},
		{Unix: 103, Offset: 3, Offered: 1, Admitted: 1, Keys: 1, MaxKeyAdmitted: 1, MaxKey: 7},
	}
	if got := a.result(); !slices.Equal(got, want) {
		t.Errorf("rows\n got %+v\nwant %+v", got, want)
	}
}

func TestAccuracyTiesPickLowestKey(t *testing.T) {
	a := newAccuracy(5, 1)
	w := a.local(0)
	for _, k := range []int{9, 4, 6} {
		w.add(5, 5, 0, k, admitted)
	}
	w.add(5, 5, 0, 3, denied)
	w.done()
	got := a.result()
	if len(got) != 1 || got[0].MaxKey != 4 || got[0].MaxKeyAdmitted != 1 {
		t.Errorf("rows %+v, want max key 4 with 1", got)
	}
}

func TestAccuracyNothingAdmitted(t *testing.T) {
	a := newAccuracy(5, 1)
	w := a.local(0)
	w.add(5, 5, 0, 3, denied)
	w.done()
	got := a.result()
	if len(got) != 1 || got[0].MaxKey != 3 || got[0].MaxKeyAdmitted != 0 {
		t.Errorf("rows %+v, want key 3 with 0 admitted", got)
	}
}

func TestAccuracyConcurrentWorkers(t *testing.T) {
	const workers, seconds, keys = 8, 20, 5
	a := newAccuracy(0, workers)
	var wg sync.WaitGroup
	for i := range workers {
		w := a.local(i)
		wg.Go(func() {
			defer w.done()
			for s := range int64(seconds) {
				for k := range keys {
					o := denied
					if k%2 == 0 {
						o = admitted
					}
					w.add(s, s, 0, k, o)
				}
			}
		})
	}
	wg.Wait()
	rows := a.result()
	if len(rows) != seconds {
		t.Fatalf("%d rows, want %d", len(rows), seconds)
	}
	for i, r := range rows {
		want := secondRow{Unix: int64(i), Offset: int64(i), Offered: workers * keys, Admitted: workers * 3, OverLimit: workers * 2,
			Keys: keys, MaxKeyAdmitted: workers, MaxKey: 0}
		if r != want {
			t.Errorf("row %d = %+v, want %+v", i, r, want)
		}
	}
}

func TestSecondClock(t *testing.T) {
	t0 := time.Unix(1000, 900_000_000)
	c := newSecondClock(t0)
	tests := []struct {
		give time.Duration
		want int64
	}{
		{0, 1000}, {99 * time.Millisecond, 1000}, {100 * time.Millisecond, 1001}, {2100 * time.Millisecond, 1003},
	}
	for _, tt := range tests {
		if got := c.second(t0.Add(tt.give)); got != tt.want {
			t.Errorf("second(t0+%v) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

// rowsNow returns the rows finalised so far without finalising the rest.
func rowsNow(a *accuracy) []secondRow {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.rows)
}
