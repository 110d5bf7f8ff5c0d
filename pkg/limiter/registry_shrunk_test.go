package limiter

import (
	"slices"
	"testing"
	"time"
)

// TestShrunk: the sharers of an epoch whose declared shrink covers it
// are named with their counts; a shrink that ended before the epoch
// began, one of an epoch that begins after Until, one not above the
// sharers, one of a name with two sharer incarnations and one of a
// replica that is not a sharer are not; a founding epoch names none. Of
// a sliding window (ShrunkOf), the next epoch, whose sharers are the
// epoch under way's, is named too, of a sharer of a version whose
// declaration holds a sliding window's shares.
func TestShrunk(t *testing.T) {
	const s = int64(time.Second / time.Microsecond)
	p := 60 * s                       // a minute
	start := 1000 * p                 // the epoch under way
	at, until := start+5*s, start+9*s // a scale-out 5 s into it
	d := Declaration{At: at, N: 4, Until: until}
	sharer := func(name string, sh Declaration) Member {
		return Member{Joined: start - 10*s, Expires: start + 90*s, Name: name, Shrink: sh}
	}
	m := Membership{Now: at, Members: []Member{
		sharer("a", d),
		sharer("b", Declaration{At: at, N: 5, Until: until}),
		sharer("c", Declaration{At: at, N: 2, Until: until}),               // not above the 3 sharers
		{Joined: start + 5*s, Expires: start + 90*s, Name: "n", Shrink: d}, // a newcomer
	}}
	want := []ShrunkSharer{{"a", 4}, {"b", 5}}
	got := m.Shrunk(start, p, lease)
	slices.SortFunc(got, func(x, y ShrunkSharer) int { return int(x.Name[0]) - int(y.Name[0]) })
	if !slices.Equal(got, want) {
		t.Errorf("Shrunk = %v, want %v", got, want)
	}
	if got := m.Shrunk(start+p, p, lease); got != nil {
		t.Errorf("the next epoch, after Until: %v, want none", got)
	}
	if got := m.Shrunk(start-p, p, lease); got != nil {
		t.Errorf("the epoch before, ended before At: %v, want none", got)
	}
	twice := m
	twice.Members = append(slices.Clone(m.Members), Member{Joined: start - 20*s, Expires: start + s, Name: "a"})
	for _, x := range twice.Shrunk(start, p, lease) {
		if x.Name == "a" {
			t.Errorf("a name with two sharer incarnations named: %v", x)
		}
	}
	founding := Membership{Now: at, Members: []Member{{Joined: start + 1, Expires: start + 90*s, Name: "a", Shrink: d}}}
	if n := founding.Sharers(start, p, lease); n >= 0 {
		t.Fatalf("founding sharers = %d, want < 0", n)
	}
	if got := founding.Shrunk(start, p, lease); got != nil {
		t.Errorf("a founding epoch: %v, want none", got)
	}
	if (Declaration{At: at, N: 4, Until: until}).covers(start, p, 0) || !d.covers(start, p, 3) || d.covers(start, p, 4) ||
		d.covers(until, p, 3) || d.covers(at-p, p, 3) {
		t.Error("covers")
	}
	// A sliding window's epochs: the next one's sharers are the epoch
	// under way's (its base began before Until), the one after's are not.
	if !d.coversOf(start, start+p, p, 3) || d.coversOf(start+p, start+2*p, p, 3) || !d.coversOf(start-p, start, p, 3) {
		t.Error("coversOf")
	}
	// Only a sharer whose declaration holds such shares (DeclaresAhead).
	m.Members[0].DeclaresAhead = true
	if got := m.ShrunkOf(start, start+p, p, lease, true); !slices.Equal(got, want[:1]) {
		t.Errorf("ShrunkOf the next epoch, its sharers the epoch under way's = %v, want %v", got, want[:1])
	}
	if got := m.ShrunkOf(start+p, start+2*p, p, lease, true); got != nil {
		t.Errorf("the epoch after the next: %v, want none", got)
	}
}
