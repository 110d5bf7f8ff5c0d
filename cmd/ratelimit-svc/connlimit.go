package main

import (
	"net"
	"sync"
	"sync/atomic"
)

// connLimiter caps the connections a set of listeners hold open together.
// A connection accepted over the cap is closed at once, so that excess
// clients are shed rather than left waiting in the accept backlog, and the
// listener goes on accepting. Its slot is given back when the connection
// is closed. Make one with newConnLimiter; it is safe for concurrent use.
type connLimiter struct {
	slots chan struct{}
	shed  atomic.Int64
}

func newConnLimiter(n int) *connLimiter {
	return &connLimiter{slots: make(chan struct{}, n)}
}

// Cap is the number of connections held at most.
func (l *connLimiter) Cap() int { return cap(l.slots) }

// Shed counts the connections closed because the cap was reached.
func (l *connLimiter) Shed() int64 { return l.shed.Load() }

// wrap returns lis with its connections counted against l.
func (l *connLimiter) wrap(lis net.Listener) net.Listener {
	return &limitedListener{Listener: lis, lim: l}
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
		select {
		case l.lim.slots <- struct{}{}:
			return &limitedConn{Conn: c, lim: l.lim}, nil
		default:
			l.lim.shed.Add(1)
			c.Close()
		}
	}
}

type limitedConn struct {
	net.Conn
	lim     *connLimiter
	release sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release.Do(func() { <-c.lim.slots })
	return err
}
