package main

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// connLimiter caps the connections a set of listeners hold open together.
// A connection accepted at the cap takes the place of the oldest held
// connection that is not serving a request (one that has sent nothing
// yet, or is idle between requests), which is closed; when every held
// connection is serving one, the new connection is closed at once. Idle
// connections held by a flood thus give way to a client that sends its
// request at once, a liveness probe among them, while requests being
// served are never cut; excess clients are shed rather than left waiting
// in the accept backlog, and the listener goes on accepting. A slot is
// given back when its connection is closed. Which connections serve a
// request comes from the HTTP servers' ConnState hook (track). Make one
// with newConnLimiter; it is safe for concurrent use.
type connLimiter struct {
	max  int
	shed atomic.Int64

	mu    sync.Mutex
	held  map[*limitedConn]struct{} // one per slot taken
	order uint64                    // accept order of the last connection
}

func newConnLimiter(n int) *connLimiter {
	return &connLimiter{max: n, held: make(map[*limitedConn]struct{}, n)}
}

// Cap is the number of connections held at most.
func (l *connLimiter) Cap() int { return l.max }

// Shed counts the connections closed because the cap was reached: new
// ones refused and held ones that gave way.
func (l *connLimiter) Shed() int64 { return l.shed.Load() }

// wrap returns lis with its connections counted against l.
func (l *connLimiter) wrap(lis net.Listener) net.Listener {
	return &limitedListener{Listener: lis, lim: l}
}

// track is an http.Server's ConnState hook: a connection that has read
// part of a request, or was hijacked, is serving one until it is idle.
func (l *connLimiter) track(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	switch s {
	case http.StateActive, http.StateHijacked:
		lc.busy.Store(true)
	case http.StateNew, http.StateIdle:
		lc.busy.Store(false)
	}
}

// admit takes a slot for c, making room by closing the oldest held
// connection that serves no request; false when there is none. Counting
// and choosing happen under one lock, so a connection that closes by
// itself meanwhile never makes another give way for nothing.
func (l *connLimiter) admit(c net.Conn) (*limitedConn, bool) {
	l.mu.Lock()
	var old *limitedConn
	if len(l.held) >= l.max {
		if old = l.oldestIdle(); old == nil {
			l.mu.Unlock()
			return nil, false
		}
		delete(l.held, old) // its slot is c's now
	}
	l.order++
	lc := &limitedConn{Conn: c, lim: l, order: l.order}
	l.held[lc] = struct{}{}
	l.mu.Unlock()
	if old != nil {
		l.shed.Add(1)
		old.Close()
	}
	return lc, true
}

// oldestIdle is the held connection accepted first of those serving no
// request, or nil. l.mu is held.
func (l *connLimiter) oldestIdle() *limitedConn {
	var old *limitedConn
	for c := range l.held {
		if !c.busy.Load() && (old == nil || c.order < old.order) {
			old = c
		}
	}
	return old
}

type limitedListener struct {
	net.Listener
	lim *connLimiter
}

// Accept returns the next connection within the cap, closing those over it.
func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc, ok := l.lim.admit(c); ok {
			return lc, nil
		}
		l.lim.shed.Add(1)
		c.Close()
	}
}

type limitedConn struct {
	net.Conn
	lim   *connLimiter
	order uint64
	busy  atomic.Bool // serving a request (connLimiter.track)
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.lim.mu.Lock()
	delete(c.lim.held, c) // a no-op once done, or for one that gave way
	c.lim.mu.Unlock()
	return err
}
