package policy

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAliasBomb: aliases that expand exponentially are cut off by the
// node budget, quickly, and the file is rejected.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("l0: &l0 [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	for i := 1; i <= 30; i++ {
		prev := "*l" + strconv.Itoa(i-1)
		b.WriteString("l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) +
			" [{key: x, descriptors: " + prev + "}, {key: y, descriptors: " + prev + "}]\n")
	}
	b.WriteString("domain: bomb\ndescriptors: *l30\n")
	start := time.Now()
	s := Compile(File{Name: "bomb.yaml", Data: []byte(b.String())})
	// Unbounded, the 2^30 expansions would run for hours; bounded, it
	// takes well under a second alone and 10 s on a saturated machine
	// under the race detector.
	if d := time.Since(start); d > time.Minute {
		t.Errorf("took %v", d)
	}
	ps := s.Problems()
	if len(s.Domains()) != 0 || len(ps) != 1 || !strings.Contains(ps[0].Message, "too many YAML nodes") {
		t.Errorf("bomb accepted: %v", ps)
	}
}
