package redisstore

import (
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// TestDecodeContended reads feed entries as Redis returns them: with the
// instant they were found contended, without it (written by an older
// replica: At is zero, and the reader uses its own clock), and refuses
// one whose instant is not a number.
func TestDecodeContended(t *testing.T) {
	entry := func(at ...string) map[string]any {
		v := map[string]any{"key": "k", "algorithm": "0", "windows": "10 1000000000 0", "replica": "a"}
		if len(at) > 0 {
			v["at"] = at[0]
		}
		return v
	}
	ws := []limiter.Window{{Limit: 10, Period: time.Second}}
	for _, tt := range []struct {
		name    string
		v       map[string]any
		wantAt  int64
		wantErr bool
	}{
		{"stamped", entry("1700000000123456"), 1700000000123456, false},
		{"from an older replica", entry(), 0, false},
		{"bad instant", entry("soon"), 0, true},
	} {
		c, err := decodeContended(tt.v)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%s: err %v, want error %v", tt.name, err, tt.wantErr)
		}
		if err == nil && (c.At != tt.wantAt || c.Key != "k" || c.Replica != "a" || len(c.Windows) != 1 || c.Windows[0] != ws[0]) {
			t.Fatalf("%s: %+v", tt.name, c)
		}
	}
}
