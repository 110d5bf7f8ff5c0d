package limitertest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// testFreed: an item that gives up units others wait for
// (SyncItem.Frees) publishes its key as freed, stamped with the store
// instant, for the other replicas to sync it at once; one whose result
// is contended is published contended all the same; an item that frees
// nothing publishes nothing; a reader never sees its own entries.
func testFreed(t *testing.T, st limiter.Store) {
	ctx := context.Background()
	read := func(replica, cursor string) ([]limiter.Contended, string) {
		t.Helper()
		cs, next, err := st.Contention(ctx, replica, cursor)
		if err != nil {
			t.Fatalf("contention %s after %q: %v", replica, cursor, err)
		}
		return cs, next
	}
	_, bc := read("b", "")
	_, ac := read("a", "")
	hour := limiter.Window{Limit: 100, Period: time.Hour}
	f := item("f", fixed(10, time.Hour), 0)
	f.Frees = true
	fr := sync1(t, st, "a", f)
	expect(t, "a's freeing sync contended", fr.Contended, false)
	sync1(t, st, "a", item("n", fixed(10, time.Hour), 1))
	k := shared("fk", hour, 50, 4, epochOf(t, st, hour))
	k.Waiting, k.Frees = 1, true
	expect(t, "a's sync of fk contended", sync1(t, st, "a", k).Contended, true)
	got, _ := read("b", bc)
	if len(got) != 2 {
		t.Fatalf("b read %+v, want f freed and fk contended", got)
	}
	if g := got[0]; g.Key != "f" || !g.Freed || g.Replica != "a" || g.At != fr.Now || g.Shrink != 0 {
		t.Errorf("b's first entry %+v, want f freed by a at %d", g, fr.Now)
	}
	if g := got[1]; g.Key != "fk" || g.Freed || g.Replica != "a" {
		t.Errorf("b's second entry %+v, want fk contended by a", g)
	}
	if got, _ := read("a", ac); len(got) != 0 {
		t.Errorf("a read its own entries: %+v", got)
	}
}
