package limiter

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkNewShareKey is a key's first request on a replica that holds
// static shares: the cost of a key in workload A of scripts/many-keys.sh,
// where most requests are a key's first on its replica. The live keys
// stay in the table, as they do there, for the garbage collector to scan.
func BenchmarkNewShareKey(b *testing.B) {
	l, rule := sharerOfTwo()
	req := []Request{{Rule: rule}}
	out := make([]Result, 1)
	keys := make([][]byte, 0, 1<<20)
	i := 0
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	for b.Loop() {
		if i == len(keys) {
			keys = append(keys, []byte("user="+strconv.Itoa(i)+"|"+rule.Fingerprint()))
		}
		req[0].Key = keys[i]
		i++
		if ok, _ := l.Decide(req, out); !ok || out[0].Mode != ModeLocal {
			b.Fatalf("key %d: %v %v, want admitted locally", i, ok, out[0].Mode)
		}
	}
	b.StopTimer()
	// What the keys keep live, the benchmark's own key bytes apart: what
	// every garbage collection cycle marks again.
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	var own uint64
	for _, k := range keys {
		own += uint64(cap(k))
	}
	live := int64(after.HeapAlloc) - int64(before.HeapAlloc) - int64(own)
	b.ReportMetric(float64(live)/float64(len(keys)), "live-B/key")
	b.ReportMetric(float64(after.HeapObjects-before.HeapObjects)/float64(len(keys)), "live-objects/key")
	runtime.KeepAlive(l)
	b.ReportMetric(float64(l.keys.size.Load()), "keys")
}

// sharerOfTwo is a replica on a store that does nothing, one of two
// sharers of every epoch for an hour, and a rule of 100 a minute: each
// key's first requests are admitted from its static share.
func sharerOfTwo() (*Limiter, *Rule) {
	l := New(WithStore(nopStore{}, "r"))
	now := l.now()
	l.eng.joined.Store(1)
	far := now/1000 + int64(time.Hour/time.Microsecond)
	two := Membership{Members: []Member{{Joined: 1, Expires: far}, {Joined: 1, Expires: far}}}
	l.eng.members.Store(&memberView{m: two, at: now})
	return l, &Rule{Algorithm: FixedWindow, Windows: []Window{{Limit: 100, Period: time.Minute}}}
}
