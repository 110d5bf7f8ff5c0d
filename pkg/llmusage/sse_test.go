package llmusage

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

type sseEvent struct{ name, data string }

// events feeds s to a parser in the given pieces and returns what it
// dispatched.
func events(maxEvent int, pieces ...string) ([]sseEvent, *Parser) {
	p := &Parser{MaxEvent: maxEvent}
	var got []sseEvent
	p.onEvent = func(name, data []byte) { got = append(got, sseEvent{string(name), string(data)}) }
	for _, s := range pieces {
		p.Write([]byte(s))
	}
	return got, p
}

// TestSSEFormat pins the event-stream parsing rules of the WHATWG HTML
// standard (section "Interpreting an event stream").
func TestSSEFormat(t *testing.T) {
	long := strings.Repeat("x", maxName+1)
	cases := []struct {
		name, in string
		want     []sseEvent
	}{
		{"one event", "data: a\n\n", []sseEvent{{"", "a"}}},
		{"named", "event: message_start\ndata: {}\n\n", []sseEvent{{"message_start", "{}"}}},
		{"multi-line data joined with LF", "data: a\ndata: b\ndata:\n\n", []sseEvent{{"", "a\nb\n"}}},
		{"no space after colon", "data:a\n\n", []sseEvent{{"", "a"}}},
		{"only one space stripped", "data:  a \n\n", []sseEvent{{"", " a "}}},
		{"field without colon", "data\n\n", []sseEvent{{"", ""}}},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []sseEvent{{"", "a"}, {"", "b"}}},
		{"CR", "data: a\r\rdata: b\r\r", []sseEvent{{"", "a"}, {"", "b"}}},
		{"mixed endings", "data: a\r\n\rdata: b\n\r\n", []sseEvent{{"", "a"}, {"", "b"}}},
		{"CR CR LF is two line ends", "data: a\r\r\n", []sseEvent{{"", "a"}}},
		{"comments ignored", ": OPENROUTER PROCESSING\n\n:\ndata: a\n: mid\n\n", []sseEvent{{"", "a"}}},
		{"name without data: nothing, name reset", "event: x\n\ndata: y\n\n", []sseEvent{{"", "y"}}},
		{"last name wins", "event: a\nevent: b\ndata: y\n\n", []sseEvent{{"b", "y"}}},
		{"other fields ignored", "id: 7\nretry: 100\nfoo: bar\ndata: a\n\n", []sseEvent{{"", "a"}}},
		{"field name must match exactly", "data : a\nData: b\n\n", nil},
		{"unterminated event dropped", "data: a\n\ndata: b\n", []sseEvent{{"", "a"}}},
		{"unterminated line dropped", "data: a", nil},
		{"leading BOM skipped", "\xEF\xBB\xBFdata: a\n\n", []sseEvent{{"", "a"}}},
		{"second BOM kept", "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n", []sseEvent{{"", "b"}}},
		{"partial BOM is data", "\xEF\xBBdata: a\n\ndata: b\n\n", []sseEvent{{"", "b"}}},
		{"UTF-8 kept", "data: ¿Qué? 你好 🙂\n\n", []sseEvent{{"", "¿Qué? 你好 🙂"}}},
		{"name too long matches nothing", "event: " + long + "\ndata: a\n\n", []sseEvent{{"", "a"}}},
		{"empty name", "event:\ndata: a\n\n", []sseEvent{{"", "a"}}},
	}
	for _, c := range cases {
		got, _ := events(0, c.in)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q\n got %q\nwant %q", c.name, c.in, got, c.want)
		}
		// The same, one byte at a time.
		got, _ = events(0, strings.Split(c.in, "")...)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s, bytewise: got %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSSEEventCap checks the bound: an event larger than MaxEvent is
// skipped and counted, a comment line of any length is not, and the
// events around either are read, however the stream is split.
func TestSSEEventCap(t *testing.T) {
	const maxEvent = 16
	cases := []struct {
		name, in string
		want     []sseEvent
		oversize int
	}{
		{"fits exactly", "data: 0123456789\n\n", []sseEvent{{"", "0123456789"}}, 0},
		{"line one byte over", "data: 0123456789A\n\ndata: ok\n\n", []sseEvent{{"", "ok"}}, 1},
		{"data over in two lines", "data: 01234567\ndata: 89ABCDEF\n\ndata: ok\n\n", []sseEvent{{"", "ok"}}, 1},
		{"rest of an oversized event skipped", "data: " + strings.Repeat("z", 40) + "\ndata: a\n\ndata: ok\n\n",
			[]sseEvent{{"", "ok"}}, 1},
		{"long comment is not an event", ": " + strings.Repeat("c", 100) + "\ndata: ok\n\n", []sseEvent{{"", "ok"}}, 0},
		{"long unknown field counts", "id: " + strings.Repeat("9", 40) + "\ndata: x\n\ndata: ok\n\n",
			[]sseEvent{{"", "ok"}}, 1},
		{"two oversized events", "data: " + strings.Repeat("a", 20) + "\n\ndata: " + strings.Repeat("b", 20) + "\n\n",
			nil, 2},
	}
	for _, c := range cases {
		for _, pieces := range [][]string{{c.in}, strings.Split(c.in, "")} {
			got, p := events(maxEvent, pieces...)
			if !reflect.DeepEqual(got, c.want) || p.Stats().Oversized != c.oversize {
				t.Errorf("%s (%d pieces): got %q oversized %d, want %q %d",
					c.name, len(pieces), got, p.Stats().Oversized, c.want, c.oversize)
			}
			if p.buffered() > maxEvent {
				t.Errorf("%s: %d bytes buffered, cap %d", c.name, p.buffered(), maxEvent)
			}
		}
	}
}

// TestSSERandomSplits feeds a stream with every kind of line end in random
// pieces and expects the events of the whole.
func TestSSERandomSplits(t *testing.T) {
	in := "\xEF\xBB\xBF: hi\r\nevent: a\r\ndata: 1\r\ndata: ü\r\n\r\n" +
		"data: 2\r\rdata: 3\n\nevent: b\ndata: 4\r\n\n"
	want, _ := events(0, in)
	if len(want) != 4 {
		t.Fatalf("whole stream: %q", want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		got, _ := events(0, randomSplit(rng, in)...)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

// randomSplit cuts s into pieces of 0 to 9 bytes.
func randomSplit(rng *rand.Rand, s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(len(s), rng.IntN(10))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
