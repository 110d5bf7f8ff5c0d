package limiter

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkApplyShrink is a sharer's shrink of every key it holds after
// a scale-out (credit_declare.go): one pass over 100 000 keys of a
// minute rule, each a share far from spent, run once per scale-out on
// the heartbeat's goroutine.
func BenchmarkApplyShrink(b *testing.B) {
	l, rule := sharerOfTwo()
	out := make([]Result, 1)
	const keys = 100000
	for i := range keys {
		key := []byte("user=" + strconv.Itoa(i) + "|" + rule.Fingerprint())
		if ok, _ := l.Decide([]Request{{Key: key, Rule: rule}}, out); !ok || out[0].Mode != ModeLocal {
			b.Fatalf("key %d not admitted from its share", i)
		}
	}
	snow := l.eng.storeNow(l.now())
	for i := 0; b.Loop(); i++ {
		n := 3 + i%90 // a larger shrink each pass, mostly: every key shrinks again, none below the unit it spent
		ds := &declState{d: Declaration{At: snow, N: n, Until: snow + int64(time.Hour/time.Microsecond)}}
		l.eng.decl.Store(ds)
		l.eng.applyShrink(ds)
		if len(ds.flagged) != 0 {
			b.Fatalf("%d keys flagged, none spent more than a share at %d", len(ds.flagged), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/keys, "ns/key")
}
