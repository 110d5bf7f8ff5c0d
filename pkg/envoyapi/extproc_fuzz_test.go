package envoyapi_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

// The fuzzed streams' bounds: the idle timeout, the big chunk a stream
// may send many times, and what a live stream may grow the heap by.
const (
	fuzzIdle     = time.Minute
	bigChunkSize = 256 << 10
	maxStreamMem = 2 << 20
)

// fuzzNames are the targets a fuzzed message may name: capped ones, one
// with a token budget, chains, and names no target has.
var fuzzNames = []string{"narrow", "primary", "secondary", "fast", "steady", "wide", "pair", "nobody", ""}

// bigChunk is an event stream chunk without a line end: a stream of them
// is one event that never ends, which a usage reader must not keep.
var bigChunk = bytes.Repeat([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]} "), bigChunkSize/48)

// FuzzExtProcStream drives the ext_proc server's Process with message
// sequences made from fuzz bytes, over an in-memory stream in a synctest
// bubble: either role, headers, bodies split anywhere, trailers, phases
// out of order, end_of_stream anywhere, observability mode, pauses past
// the idle timeout, half-close, cancel and malformed messages. Nothing
// may panic; a message is answered by at most one response of its kind
// (or an ImmediateResponse where Envoy allows one), by exactly one while
// the stream goes on, and by none in observability mode; every slot is
// back when the stream ends; a live stream that was sent megabytes holds
// less than maxStreamMem.
func FuzzExtProcStream(f *testing.F) {
	snap := policy.Compile(policy.File{Name: "targets.yaml", Data: []byte(targetsPolicy)})
	if policy.HasErrors(snap.Problems()) {
		f.Fatalf("test policy: %v", snap.Problems())
	}
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) {
			d := newFuzzDriver(t, snap, data)
			d.run()
		})
	})
}

// fuzzSeeds are sequences the fuzzer starts from (role, then operations
// as step reads them): a request routed on its header with a streamed
// response of big chunks; the same on a buffered chat body split in two;
// an upstream attempt answered 429 with a JSON error body; a stream gone
// silent past the idle timeout; observability mode; phases out of order.
func fuzzSeeds() [][]byte {
	return [][]byte{
		{0, 0, 0x11, 0, 2, 0x10, 3, 0x08, 32, 3, 0x03},
		{0, 0, 0x02, 1, 0x07, 0, 50, 20, 2, 0x10, 3, 0x08, 32, 3, 0x03},
		{1, 0, 0x71, 1, 1, 0, 2, 0x44, 5, 1, 3, 0x07},
		{3, 0, 0x73, 3, 2, 3, 1, 0x07, 3, 9, 30, 2, 0x00, 3, 0x05},
		{0, 0, 0x11, 0, 6, 1, 6, 3, 0, 0x11, 0},
		{2, 0, 0x81, 4, 0x80, 7, 2},
		{3, 3, 0x01, 2, 0x01, 0, 0x00, 5, 0, 1, 0x00, 5, 'a', 'b', 'c', 'd', 'e', 7, 0},
	}
}

// fuzzDriver plays one fuzzed stream against a fresh server.
type fuzzDriver struct {
	t      *testing.T
	in     fuzzInput
	lim    *limiter.Limiter
	x      *envoyapi.ExtProc
	s      *envoytest.MemStream
	done   chan error
	ended  bool
	first  bool // the next message is the stream's first
	base   uint64
	bigged bool // a big chunk was sent
}

func newFuzzDriver(t *testing.T, snap *policy.Snapshot, data []byte) *fuzzDriver {
	d := &fuzzDriver{t: t, in: fuzzInput{data}, lim: limiter.New(), done: make(chan error, 1), first: true}
	d.x = envoyapi.NewExtProc(staticPolicies{snap}, envoyapi.ExtProcDeps{Limits: d.lim, Slots: d.lim,
		Breakers: resilience.NewRegistry(), StreamIdleTimeout: fuzzIdle})
	var md []string
	switch d.in.byte() % 5 {
	case 0:
		md = []string{"x-resil-role", "downstream"}
	case 1:
		md = []string{"x-resil-role", "upstream"}
	case 2:
		md = []string{"x-resil-role", "sideways"}
	case 3:
		md = []string{"x-resil-role", "upstream", "x-resil-reselect", "true"}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	d.base = ms.HeapAlloc
	d.s = envoytest.NewMemStream(context.Background(), 4, md...)
	go func() { d.done <- d.x.Process(d.s) }()
	return d
}

// run plays the input's operations until it or the stream ends, then
// ends the stream and checks that every slot is back.
func (d *fuzzDriver) run() {
	for !d.ended && len(d.in.b) > 0 {
		d.step(d.in.byte())
	}
	if !d.ended {
		d.checkMemory()
		d.s.CloseSend()
		<-d.done
	}
	d.s.Cancel() // as gRPC does when Process returns
	for _, name := range fuzzNames {
		if n := d.lim.InUse(envoyapi.SlotKey(name)); n != 0 {
			d.t.Fatalf("%d slots of %q held after the stream ended", n, name)
		}
	}
}

// step plays one operation.
func (d *fuzzDriver) step(op byte) {
	switch op % 8 {
	case 0:
		d.send(d.requestHeaders())
	case 1:
		d.requestBody()
	case 2:
		d.send(d.responseHeaders())
	case 3:
		d.responseBody()
	case 4, 5:
		d.send(trailers(op%8 == 5, d.in.byte()&0x80 != 0))
	case 6:
		time.Sleep([]time.Duration{time.Second, fuzzIdle - time.Second, fuzzIdle, 10 * time.Minute}[d.in.byte()%4])
		d.settle()
	case 7:
		d.end(d.in.byte() % 3)
	}
}

// end half-closes or cancels the stream, or sends a message of no kind.
func (d *fuzzDriver) end(how byte) {
	switch how {
	case 0:
		d.s.CloseSend()
	case 1:
		d.s.Cancel()
	case 2:
		d.send(&extprocv3.ProcessingRequest{})
		return
	}
	<-d.done
	d.ended = true
}

// settle waits for the server to block, and notes a stream it ended.
func (d *fuzzDriver) settle() {
	synctest.Wait()
	select {
	case <-d.done:
		d.ended = true
	default:
	}
}

// send hands one message to the server and checks what it answered.
func (d *fuzzDriver) send(req *extprocv3.ProcessingRequest) {
	d.first = false
	if err := d.s.SendRequest(req); err != nil {
		d.t.Fatalf("send: %v", err)
	}
	d.settle()
	var got []*extprocv3.ProcessingResponse
	for len(got) < 8 {
		select {
		case r := <-d.s.Responses():
			got = append(got, r)
			continue
		default:
		}
		break
	}
	d.check(req, got)
}
