package redistest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServerDiesWithCrashedTest: a test binary that dies without running
// its cleanups (here os.Exit in the middle of a test) leaves no
// redis-server behind. The test runs itself as that binary.
func TestServerDiesWithCrashedTest(t *testing.T) {
	if os.Getenv("REDISTEST_CRASH") == "1" {
		s := Start(t)
		os.Stdout.WriteString("addr " + s.Addr + "\n")
		os.Exit(3) // no cleanup runs
	}
	lookPath(t, "redis-server")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerDiesWithCrashedTest$")
	// The crashing binary's temporary directories, which no cleanup
	// removes, go under this test's own.
	cmd.Env = append(os.Environ(), "REDISTEST_CRASH=1", "TMPDIR="+t.TempDir())
	out, _ := cmd.Output()
	var addr string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
			addr = a
		}
	}
	if addr == "" {
		t.Fatalf("the crashing test printed no address:\n%s", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return // gone
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s still answers after its test binary died", addr)
		}
		time.Sleep(20 * time.Millisecond) // polls another process's exit
	}
}
