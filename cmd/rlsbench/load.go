package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// connectTimeout bounds how long a run waits for each connection to be
// ready before it starts the clock.
const connectTimeout = 5 * time.Second

// numCodes is the number of gRPC status codes (OK .. Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

// addrStats counts the requests sent to one address.
type addrStats struct {
	Addr      string `json:"addr"`
	Requests  uint64 `json:"requests"`
	OK        uint64 `json:"ok"`
	OverLimit uint64 `json:"over_limit"`
	Errors    uint64 `json:"errors"`
}

// worker is the state one load goroutine owns. The atomic counters are
// read by the progress printer while the run is going; everything else
// is read only after the worker has returned.
type worker struct {
	ok, over, errs atomic.Uint64

	hist      histogram
	malformed uint64
	codes     [numCodes]uint64
	perAddr   []addrStats
	tally     *localTally
	draw      *keyDraw // nil: keys in turn
}

// loader drives one run. It is built by runLoad and lives for one run.
type loader struct {
	cfg     benchConfig
	tmpl    *requestTemplate
	clients [][]ratelimitv3.RateLimitServiceClient // [address][connection]
	rpcCtx  context.Context                        // outlives the load window so in-flight requests finish
	start   time.Time
	clock   secondClock
	acc     *accuracy
	next    atomic.Int64 // index of the next request
	workers []*worker
}

// runResult is the raw outcome of a run; newReport summarises it.
type runResult struct {
	cfg         benchConfig
	tmpl        *requestTemplate
	start       time.Time
	elapsed     time.Duration
	interrupted bool
	workers     []*worker
	rows        []secondRow
	limit       *limitReport // nil without -limit
	cpu         []cpuUsage
}

// runLoad connects to every address, sends requests until the count or
// the duration is reached or ctx is cancelled, and returns what it saw.
// Requests in flight when the run stops are allowed to finish.
func runLoad(ctx context.Context, cfg benchConfig, stderr io.Writer) (*runResult, error) {
	tmpl, err := newRequestTemplate(cfg.domain, cfg.descriptor, cfg.hits, cfg.keys)
	if err != nil {
		return nil, err
	}
	conns, err := dialAll(ctx, cfg)
	defer closeAll(conns)
	if err != nil {
		return nil, err
	}
	cpu, err := startCPU(cfg.pids)
	if err != nil {
		return nil, err
	}
	rpcCtx, cancelRPC := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRPC()
	l := &loader{cfg: cfg, tmpl: tmpl, rpcCtx: rpcCtx}
	for _, cs := range conns {
		row := make([]ratelimitv3.RateLimitServiceClient, len(cs))
		for j, cc := range cs {
			row[j] = ratelimitv3.NewRateLimitServiceClient(cc)
		}
		l.clients = append(l.clients, row)
	}
	res := l.run(ctx, stderr)
	res.cpu = cpu.finish(res.requests())
	return res, nil
}

func (l *loader) run(ctx context.Context, stderr io.Writer) *runResult {
	l.start = time.Now()
	l.clock = newSecondClock(l.start)
	l.acc = newAccuracy(l.clock.second(l.start), l.cfg.concurrency)
	if l.cfg.limit > 0 {
		l.acc.checkLimit(l.cfg.limit, l.cfg.window)
	}
	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if l.cfg.duration > 0 {
		var cancelTimeout context.CancelFunc
		loadCtx, cancelTimeout = context.WithTimeout(loadCtx, l.cfg.duration)
		defer cancelTimeout()
	}

	for i := range l.cfg.concurrency {
		w := &worker{
			perAddr: make([]addrStats, len(l.clients)),
			tally:   l.acc.local(i),
			draw:    newKeyDraw(l.cfg.zipf, l.cfg.keys, l.cfg.seed, i),
		}
		for a := range w.perAddr {
			w.perAddr[a].Addr = l.cfg.addrs[a]
		}
		l.workers = append(l.workers, w)
	}
	stopProgress := l.startProgress(ctx, stderr, time.Second)
	var workers sync.WaitGroup
	for _, w := range l.workers {
		workers.Go(func() { l.work(loadCtx, w) })
	}
	workers.Wait()
	stopProgress()
	return &runResult{
		cfg:         l.cfg,
		tmpl:        l.tmpl,
		start:       l.start,
		elapsed:     time.Since(l.start),
		interrupted: ctx.Err() != nil,
		workers:     l.workers,
		rows:        l.acc.result(),
		limit:       l.acc.limit(),
	}
}

// work sends requests until the run's count is used up or ctx is done.
func (l *loader) work(ctx context.Context, w *worker) {
	defer w.tally.done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for ctx.Err() == nil {
		i := l.next.Add(1) - 1
		if l.cfg.count > 0 && i >= l.cfg.count {
			return
		}
		var due time.Time
		if l.cfg.rate > 0 {
			due = l.start.Add(time.Duration(float64(i) / l.cfg.rate * float64(time.Second)))
			if !sleepUntil(ctx, &timer, due) {
				return
			}
		}
		l.send(w, i, due)
	}
}

// send issues request i. Addresses take turns request by request; each
// key is sent to every address in turn, so with several replicas every
// key is spread over all of them. With -zipf the key is the worker's
// next draw instead, and lands on whichever address request i goes to.
func (l *loader) send(w *worker, i int64, due time.Time) {
	naddr := int64(len(l.clients))
	addr := int(i % naddr)
	round := i / naddr
	key := int(round % int64(l.cfg.keys))
	if w.draw != nil {
		key = w.draw.next()
	}
	client := l.clients[addr][round%int64(l.cfg.conns)]
	req := l.tmpl.request(key)

	sent := time.Now()
	ctx, cancel := context.WithTimeout(l.rpcCtx, l.cfg.timeout)
	resp, err := client.ShouldRateLimit(ctx, req)
	cancel()
	end := time.Now()
	if due.IsZero() {
		due = sent
	}
	o := w.record(addr, end.Sub(due), len(req.GetDescriptors()), resp, err)
	w.tally.add(l.clock.second(sent), l.clock.second(end), end.Sub(sent), key, o)
}

// record counts one answer and returns its outcome. Like Envoy, it takes
// any answer other than OVER_LIMIT as admitted, and counts answers that
// break the protocol (UNKNOWN overall code, or not one status per
// descriptor) as malformed as well.
func (w *worker) record(addr int, latency time.Duration, ndesc int, resp *ratelimitv3.RateLimitResponse, err error) outcome {
	pa := &w.perAddr[addr]
	pa.Requests++
	if err != nil {
		code := status.Code(err)
		if int(code) >= numCodes {
			code = codes.Unknown
		}
		w.codes[code]++
		w.errs.Add(1)
		pa.Errors++
		return failed
	}
	w.hist.record(latency)
	if resp.GetOverallCode() == ratelimitv3.RateLimitResponse_OVER_LIMIT {
		w.over.Add(1)
		pa.OverLimit++
		return denied
	}
	if resp.GetOverallCode() != ratelimitv3.RateLimitResponse_OK || len(resp.GetStatuses()) != ndesc {
		w.malformed++
	}
	w.ok.Add(1)
	pa.OK++
	return admitted
}

// sleepUntil waits until t, reusing *timer. It reports false if ctx ends
// first.
func sleepUntil(ctx context.Context, timer **time.Timer, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	if *timer == nil {
		*timer = time.NewTimer(d)
	} else {
		(*timer).Reset(d)
	}
	select {
	case <-ctx.Done():
		return false
	case <-(*timer).C:
		return true
	}
}

func (r *runResult) requests() uint64 {
	var n uint64
	for _, w := range r.workers {
		n += w.ok.Load() + w.over.Load() + w.errs.Load()
	}
	return n
}

// dialAll opens cfg.conns connections to every address and waits until
// each is ready. It returns what it opened even on error, for closing.
func dialAll(ctx context.Context, cfg benchConfig) ([][]*grpc.ClientConn, error) {
	var all [][]*grpc.ClientConn
	for _, addr := range cfg.addrs {
		var row []*grpc.ClientConn
		for range cfg.conns {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return append(all, row), fmt.Errorf("address %s: %w", addr, err)
			}
			row = append(row, cc)
			if err := waitReady(ctx, cc); err != nil {
				return append(all, row), fmt.Errorf("address %s: %w", addr, err)
			}
		}
		all = append(all, row)
	}
	return all, nil
}

func waitReady(ctx context.Context, cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	cc.Connect()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("cannot connect (state %s)", s)
		}
		if !cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("not ready (state %s): %w", s, ctx.Err())
		}
	}
}

func closeAll(conns [][]*grpc.ClientConn) {
	for _, row := range conns {
		for _, cc := range row {
			cc.Close()
		}
	}
}
