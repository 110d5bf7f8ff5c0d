package envoyapi

import (
	"strconv"
	"testing"
	"time"
)

// TestLostAttemptsBounded: an entry is taken once; a full map drops
// entries older than lostTTL to make room, and forgets a new entry when
// every one is fresh.
func TestLostAttemptsBounded(t *testing.T) {
	var l lostAttempts
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l.put("", "ignored", t0)
	for i := range maxLost {
		l.put(strconv.Itoa(i), "a", t0)
	}
	l.put("late", "b", t0.Add(time.Second))
	if _, ok := l.take("late"); ok {
		t.Error("a full map of fresh entries took another")
	}
	if got, ok := l.take("7"); !ok || got != "a" {
		t.Errorf("take 7: %q %v", got, ok)
	}
	if _, ok := l.take("7"); ok {
		t.Error("taken twice")
	}
	l.put("7", "a", t0)
	l.put("later", "c", t0.Add(2*lostTTL))
	if got, ok := l.take("later"); !ok || got != "c" {
		t.Errorf("after the old entries expired: %q %v", got, ok)
	}
	if n := len(l.m); n != 0 {
		t.Errorf("%d old entries kept", n)
	}
	if _, ok := l.take(""); ok {
		t.Error("an empty request id was kept")
	}
}
