package llmusage

import (
	"runtime"
	"strings"
	"testing"
)

// benchStream is an OpenAI stream of 200 content chunks and its usage.
func benchStream() []byte {
	var b strings.Builder
	for range 200 {
		b.WriteString(openAIChunk + `"choices":[{"index":0,"delta":{"content":" the quick brown fox"},` +
			`"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	}
	b.WriteString(openAIWithUsage)
	return []byte(b.String())
}

var benchSizes = []struct {
	name string
	size int
}{{"100B", 100}, {"8KiB", 8 << 10}}

// parseInChunks feeds stream in chunks of size bytes and returns the
// parser and the number of chunks.
func parseInChunks(stream []byte, size int) (*Parser, int) {
	p := new(Parser)
	chunks := 0
	for rest := stream; len(rest) > 0; chunks++ {
		n := min(size, len(rest))
		p.Write(rest[:n])
		rest = rest[n:]
	}
	return p, chunks
}

// TestBenchStream checks what BenchmarkParser parses.
func TestBenchStream(t *testing.T) {
	for _, s := range benchSizes {
		p, _ := parseInChunks(benchStream(), s.size)
		if st := p.Stats(); p.Usage().Total != 29 || !p.Done() || st.Events != 205 || st.Malformed+st.Oversized != 0 {
			t.Errorf("%s: usage %+v done %v stats %+v", s.name, p.Usage(), p.Done(), st)
		}
	}
}

// BenchmarkParser reports the cost of one Write of a 100 B or 8 KiB chunk
// of a stream, as ns/chunk and allocs/chunk.
func BenchmarkParser(b *testing.B) {
	stream := benchStream()
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			chunks := 0
			for b.Loop() {
				p, n := parseInChunks(stream, s.size)
				chunks += n
				if p.Usage().Total != 29 {
					b.Fatalf("usage %+v", p.Usage())
				}
			}
			runtime.ReadMemStats(&after)
			b.SetBytes(int64(len(stream)))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(chunks), "ns/chunk")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(chunks), "allocs/chunk")
		})
	}
}

// TestContentChunkAllocs: once its buffer has grown, a parser reads a
// content chunk, in one piece or two, without allocating; only events it
// decodes (usage, errors) allocate.
func TestContentChunkAllocs(t *testing.T) {
	for _, chunk := range []string{
		openAIChunk + `"choices":[{"index":0,"delta":{"content":" the quick brown fox"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n",
		"event: content_block_delta\r\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the quick brown fox"}}` + "\r\n\r\n",
	} {
		b := []byte(chunk)
		var p Parser
		p.Write(b)
		half := len(b) / 2
		allocs := testing.AllocsPerRun(100, func() {
			p.Write(b[:half])
			p.Write(b[half:])
		})
		if allocs != 0 {
			t.Errorf("%v allocations for a content chunk %.30q…", allocs, chunk)
		}
	}
}
