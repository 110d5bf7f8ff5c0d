package tcpproxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/internal/tcpproxy"
)

// echoServer answers every line with the same line until the client
// closes; it stops when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if got != line+"\n" {
		t.Fatalf("echo %q, want %q", got, line)
	}
	return time.Since(start)
}

// dialProxy starts a proxy with the given delay in front of an echo
// server and dials it; both are closed when the test ends.
func dialProxy(t *testing.T, delay time.Duration) (*tcpproxy.Proxy, net.Conn) {
	t.Helper()
	p, err := tcpproxy.Start(echoServer(t), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

func TestDelaysEachDirection(t *testing.T) {
	const delay = 30 * time.Millisecond
	p, c := dialProxy(t, delay)
	r := bufio.NewReader(c)
	for i := range 3 {
		if rtt := roundTrip(t, c, r, "ping"); rtt < 2*delay {
			t.Errorf("round trip %d took %v, want at least %v", i, rtt, 2*delay)
		}
	}
	p.SetDelay(0)
	if rtt := roundTrip(t, c, r, "fast"); rtt >= 2*delay {
		t.Logf("round trip without delay took %v (a busy machine)", rtt)
	}
}

// Pipelined requests are delayed, not serialised: ten lines sent at once
// come back after about one round trip, not ten.
func TestPipelinedChunksOverlap(t *testing.T) {
	const delay = 40 * time.Millisecond
	_, c := dialProxy(t, delay)
	r := bufio.NewReader(c)
	start := time.Now()
	for range 10 {
		if _, err := io.WriteString(c, "x\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // separate chunks, paced in real time
	}
	for range 10 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 2*delay || took > 8*delay {
		t.Errorf("ten pipelined lines took %v, want about %v", took, 2*delay)
	}
}

func TestLargeTransferKeepsOrder(t *testing.T) {
	_, c := dialProxy(t, 5*time.Millisecond)
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	go func() {
		_, _ = c.Write(want)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes back, not the %d sent in order", len(got), len(want))
	}
}

func TestCloseEndsConnectionsAndGoroutines(t *testing.T) {
	target := echoServer(t)
	before := runtime.NumGoroutine()
	p, err := tcpproxy.Start(target, time.Hour) // nothing ever gets through
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "held\n"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Accepted() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling, bounded
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 8)); err == nil {
			t.Errorf("connection %d still open after Close (read %d bytes)", i, n)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("proxy still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// The proxy's goroutines have ended when Close returned; only the
	// echo server's, which end as their clients close, may linger.
	for _, c := range conns {
		c.Close()
	}
	for time.Now().Before(deadline) && runtime.NumGoroutine() > before {
		time.Sleep(5 * time.Millisecond) // polling, bounded
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before Start", n, before)
	}
}
