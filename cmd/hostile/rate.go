package main

import (
	"context"
	"io"
	"sort"
	"sync"
	"time"

	ratelimitcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// second is one client-side second of a steady load: the answers to the
// requests sent in it.
type second struct {
	Unix   int64 `json:"unix"`
	OK     int   `json:"ok"`
	Over   int   `json:"over_limit"`
	Errors int   `json:"errors"`
}

// rateResult is a steady load's answers by the second they were sent in.
type rateResult struct {
	Rate    int      `json:"rate"`
	Seconds []second `json:"seconds"`
}

// secondTally counts answers by the Unix second of sending; safe for
// concurrent use.
type secondTally struct {
	mu sync.Mutex
	m  map[int64]*second
}

func (t *secondTally) add(sent time.Time, resp *ratelimitv3.RateLimitResponse, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := sent.Unix()
	s := t.m[u]
	if s == nil {
		s = &second{Unix: u}
		t.m[u] = s
	}
	switch {
	case err != nil:
		s.Errors++
	case resp.GetOverallCode() == ratelimitv3.RateLimitResponse_OK:
		s.OK++
	default:
		s.Over++
	}
}

func (t *secondTally) seconds() []second {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]second, 0, len(t.m))
	for _, s := range t.m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Unix < out[j].Unix })
	return out
}

// runRate sends one key at a steady rate (open loop: a request every
// 1/rate s whatever the answers) and tallies the answers by second.
func runRate(ctx context.Context, args []string, stderr io.Writer) (any, error) {
	fs := newFlags("rate", stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address")
	domain := fs.String("domain", "hostile", "RLS domain")
	key := fs.String("key", "rate", "descriptor key")
	value := fs.String("value", "one", "descriptor value")
	rate := fs.Int("rate", 200, "requests per second")
	d := fs.Duration("d", 20*time.Second, "how long the load runs")
	timeout := fs.Duration("timeout", time.Second, "deadline of each call")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := positive("rate", *rate); err != nil {
		return nil, err
	}
	if err := positive("d", *d); err != nil {
		return nil, err
	}
	cc, err := dial(*addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	c := ratelimitv3.NewRateLimitServiceClient(cc)
	req := &ratelimitv3.RateLimitRequest{Domain: *domain, Descriptors: []*ratelimitcommon.RateLimitDescriptor{entries(*key, *value)}}
	lctx, cancel := context.WithTimeout(ctx, *d)
	defer cancel()
	var t secondTally
	t.m = map[int64]*second{}
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	for lctx.Err() == nil {
		select {
		case <-lctx.Done():
		case sent := <-tick.C:
			wg.Go(func() {
				cctx, ccancel := context.WithTimeout(ctx, *timeout)
				defer ccancel()
				resp, err := c.ShouldRateLimit(cctx, req)
				t.add(sent, resp, err)
			})
		}
	}
	wg.Wait()
	return rateResult{Rate: *rate, Seconds: t.seconds()}, nil
}
