package envoyapi

import (
	"bytes"
	"testing"
)

// bigPrompt is an 8 MiB chat request whose model comes first, as
// clients write it, followed by one long message.
func bigPrompt() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o","messages":[{"role":"user","content":"`)
	line := []byte(`Summarise the following: \"quoted\" text,\nnew lines and \u00e9 escapes. `)
	for b.Len() < 8<<20-64 {
		b.Write(line)
	}
	b.WriteString(`"}],"stream":true}`)
	return b.Bytes()
}

// BenchmarkFindModel8MiB finds the model of an 8 MiB body with the
// model first.
func BenchmarkFindModel8MiB(b *testing.B) {
	body := bigPrompt()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if f, ok := findModel(body); !ok || f.value != "gpt-4o" {
			b.Fatal("model not found")
		}
	}
}
