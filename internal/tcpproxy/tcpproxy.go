// Package tcpproxy is a TCP proxy for tests that delays traffic: it
// listens on a loopback port, forwards every connection to a target
// address, and holds each chunk of bytes, in either direction, for a
// configurable duration before passing it on. A delay d per direction
// adds 2·d to every request/reply round trip while keeping pipelined
// traffic flowing (chunks are delayed, not serialised).
package tcpproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkSize is the most bytes read at once from one side.
const chunkSize = 32 << 10

// queueLen is how many chunks may wait per direction before the reader
// stops reading (back-pressure to the sender).
const queueLen = 256

// dialTimeout bounds the connection to the target.
const dialTimeout = 2 * time.Second

// Proxy forwards connections from Addr to its target with a delay. Build
// it with Start; Close stops it. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	accept atomic.Int64
}

// Start listens on 127.0.0.1:0 and forwards every accepted connection to
// target, delaying each chunk by delay in each direction.
func Start(target string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	p.delay.Store(int64(delay))
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the delay of chunks read from now on. Chunks keep
// their order: one never overtakes an earlier one of its direction.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Delay is the current delay per direction.
func (p *Proxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accept.Load() }

// Close stops listening, closes every connection, drops the chunks still
// held, and returns once all the proxy's goroutines have ended. Later
// calls do nothing.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.done)
		err = p.ln.Close()
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return err
}

// track registers c so Close can close it; it reports false (and closes
// c) when the proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			default:
				continue // a transient accept error
			}
		}
		p.accept.Add(1)
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// handle dials the target for the accepted connection c and pumps both
// directions until both have ended or the proxy closes. A side that
// finishes sending is half-closed towards the other once its held chunks
// are delivered; a failed write closes both connections.
func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	u, err := d.Dial("tcp", p.target)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(u) {
		p.untrack(c)
		return
	}
	var stop sync.Once
	abort := func() {
		stop.Do(func() {
			p.untrack(c)
			p.untrack(u)
		})
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(c, u, abort) }()
	go func() { defer pumps.Done(); p.pump(u, c, abort) }()
	pumps.Wait()
	abort()
}

// chunk is bytes read at one instant, due for writing at due.
type chunk struct {
	due  time.Time
	data []byte
}

// pump copies src to dst, each chunk held until its due time. When src
// ends it half-closes dst; when a write fails or the proxy closes it
// calls abort.
func (p *Proxy) pump(src, dst net.Conn, abort func()) {
	queue := make(chan chunk, queueLen)
	quit := make(chan struct{}) // the writer stopped early
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(queue)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{due: time.Now().Add(p.Delay()), data: buf[:n]}:
				case <-quit:
					return
				case <-p.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer reader.Wait()
	if !p.write(queue, dst) {
		close(quit)
		abort() // also unblocks the reader's Read
		return
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// write delivers the queue's chunks to dst at their due times, and
// reports false if a write failed or the proxy closed.
func (p *Proxy) write(queue <-chan chunk, dst net.Conn) bool {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ch := range queue {
		if wait := time.Until(ch.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-p.done:
				return false
			}
		}
		if _, err := dst.Write(ch.data); err != nil {
			return false
		}
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}
