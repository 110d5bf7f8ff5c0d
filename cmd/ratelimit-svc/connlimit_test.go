package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// capped serves an OK handler on a loopback listener capped at n
// connections, with the limiter's ConnState hook; a request to /block
// is answered once block is closed.
func capped(t *testing.T, n int, block chan struct{}) (*connLimiter, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := newConnLimiter(n)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-block
		}
		io.WriteString(w, "ok")
	}),
		ConnState: lim.track, ReadHeaderTimeout: time.Minute}
	go srv.Serve(lim.wrap(lis))
	t.Cleanup(func() {
		if block != nil {
			close(block)
		}
		srv.Close()
	})
	return lim, lis.Addr().String()
}

// hold opens a raw connection that sends send and then nothing, and
// waits until the limiter holds want connections, and with busy, all of
// them in a handler.
func hold(t *testing.T, lim *connLimiter, addr, send string, want int, busy bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		lim.mu.Lock()
		n, serving := len(lim.held), 0
		for lc := range lim.held {
			if lc.busy.Load() {
				serving++
			}
		}
		lim.mu.Unlock()
		if n == want && (!busy || serving == want) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("held %d (%d serving a request), want %d", n, serving, want)
		}
		time.Sleep(time.Millisecond) // polls a condition; the server's goroutines set it
	}
}

func probe(addr string) error {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + addr + "/healthcheck")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// At the cap, connections that are in no handler (sent nothing, or a
// header still trickling in) give way to a new one, the oldest first: a
// probe is answered while a flood holds such connections.
func TestConnLimiterEvictsIdle(t *testing.T) {
	lim, addr := capped(t, 2, nil)
	first := hold(t, lim, addr, "", 1, false)
	hold(t, lim, addr, "GET / HTTP/1.1\r\n", 2, false) // a header trickling in
	if err := probe(addr); err != nil {
		t.Fatalf("GET at the cap, the held connections idle: %v", err)
	}
	if got := lim.Shed(); got != 1 {
		t.Fatalf("shed %d, want 1 (the oldest idle connection)", got)
	}
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := first.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("the oldest idle connection: read %v, want it closed", err)
	}
}

// A connection serving a request is never closed for a new one: at the
// cap with every held connection in a handler, the new one is shed. A
// request still being read is not yet served (net/http marks a
// connection active once its header is read), so a connection that
// trickles its header gives way like an idle one.
func TestConnLimiterKeepsRequests(t *testing.T) {
	lim, addr := capped(t, 2, make(chan struct{}))
	hold(t, lim, addr, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n", 1, true)
	hold(t, lim, addr, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n", 2, true)
	if err := probe(addr); err == nil {
		t.Fatal("GET at the cap with every connection in a handler: answered, want shed")
	}
	if got := lim.Shed(); got < 1 {
		t.Fatalf("shed %d, want at least 1", got)
	}
	lim.mu.Lock()
	n := len(lim.held)
	lim.mu.Unlock()
	if n != 2 {
		t.Fatalf("held %d after the shed, want the 2 in a handler", n)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// closeFlag is a net.Conn that records whether it was closed.
type closeFlag struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeFlag) Close() error { c.closed.Store(true); return nil }

// A held connection that closes by itself while a new one is admitted
// at the cap makes room for it: no other connection gives way. (The
// server's closing of a client's dropped connection races with Accept.)
func TestConnLimiterNoNeedlessEviction(t *testing.T) {
	for i := range 20000 {
		lim := newConnLimiter(2)
		a, _ := lim.admit(&closeFlag{})
		bc := &closeFlag{}
		lim.admit(bc)
		done := make(chan struct{})
		go func() { a.Close(); close(done) }()
		if _, ok := lim.admit(&closeFlag{}); !ok {
			t.Fatalf("round %d: the new connection was shed with an idle one held", i)
		}
		<-done
		if bc.closed.Load() {
			t.Fatalf("round %d: the second connection gave way though the first closed by itself", i)
		}
	}
}
