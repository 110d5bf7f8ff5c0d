package llmusage

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// FuzzStream feeds any bytes in random pieces: the parser never panics,
// never holds more than its cap, and gives the result of the whole stream
// whatever the split.
func FuzzStream(f *testing.F) {
	for _, c := range streamCases {
		for _, in := range lineEnds(c.in) {
			f.Add([]byte(in), uint64(1), uint16(0))
			f.Add([]byte(in), uint64(2), uint16(200))
		}
	}
	f.Add([]byte("\xEF\xBB\xBF: c\r\rdata:x\r\n\r\nevent: error\ndata: {\"error\":\"e\"}\n\n"), uint64(3), uint16(8))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64, maxEvent uint16) {
		whole := Parser{MaxEvent: int(maxEvent)}
		whole.Write(in)
		limit := whole.limit()
		if whole.buffered() > limit {
			t.Fatalf("whole: %d bytes buffered, cap %d", whole.buffered(), limit)
		}
		split := Parser{MaxEvent: int(maxEvent)}
		rng := rand.New(rand.NewPCG(seed, seed))
		for rest := in; len(rest) > 0; {
			n := min(len(rest), rng.IntN(16))
			split.Write(rest[:n])
			rest = rest[n:]
			if split.buffered() > limit {
				t.Fatalf("split: %d bytes buffered, cap %d", split.buffered(), limit)
			}
		}
		if a, b := summarize(&whole), summarize(&split); !reflect.DeepEqual(a, b) {
			t.Fatalf("whole %+v %v\nsplit %+v %v", a, a.Err, b, b.Err)
		}
		if u := whole.Usage(); u.Input < 0 || u.Output < 0 || u.Total < 0 {
			t.Fatalf("negative usage %+v", u)
		}
	})
}

// FuzzInjectStreamUsage: the result is valid JSON that asks for usage
// whenever the request is streamed, or the body comes back unchanged, or
// an error.
func FuzzInjectStreamUsage(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `{"stream":true,"stream_options":{}}`,
		`{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":null}`,
		`{"stream":false}`, ` { "stream" : true } `, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := InjectStreamUsage(in)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %q", out, in)
		}
		e, err := EstimateRequest(out, 0)
		if err != nil {
			return // a body encoding/json refuses for other reasons (say, a bad max_tokens)
		}
		if e.Stream && !e.StreamUsage {
			t.Fatalf("%q → %q does not ask for usage", in, out)
		}
	})
}
