package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestStartRefusesAnotherServersPort: a server started on a port another
// server holds exits without binding it, and the port's PING answers
// come from the other; start reports it (Start then tries another port)
// rather than hand the test the other's server.
func TestStartRefusesAnotherServersPort(t *testing.T) {
	first := Start(t)
	_, p, err := net.SplitHostPort(first.Addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	s, err := startOn(lookPath(t, "redis-server"), t.TempDir(), port, nil)
	if err == nil {
		s.Stop()
		t.Fatalf("a second server on %s was started", first.Addr)
	}
	if !strings.Contains(err.Error(), "process") && !strings.Contains(err.Error(), "exited") {
		t.Fatalf("error %v, want one saying the port belongs to another process", err)
	}
	t.Logf("refused: %v", strings.SplitN(err.Error(), "\n", 2)[0])
}
