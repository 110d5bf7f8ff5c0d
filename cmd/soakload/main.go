// Command soakload keeps a steady ext_proc load on ratelimit-svc's
// downstream role, as Envoy's filter in front of an LLM route would: each
// request is a stream with gRPC initial metadata x-resil-role: downstream,
// request headers, a buffered JSON body naming -model, then a 200
// text/event-stream response of -chunks body chunks, -gap apart. The
// target's max_concurrent slot is taken at the body and given back at the
// last chunk, so the load takes and releases slots all the time.
//
//	soakload -addr 127.0.0.1:8081,127.0.0.1:8083 -model soak -rate 100 -d 10m -cap 12
//
// Requests are sent open loop at -rate per second, round-robin over the
// addresses, at most -inflight at once (a request due while that many are
// open is counted as skipped, not sent). At the end it prints one line of
// JSON: answers by kind ("ok", "reply 429", "error Unavailable", …), the
// decision latency, and the most requests it saw admitted at once; with
// -cap it counts the moments that exceeded the cap. A request counts as
// admitted from its answer to the body until it sends its last chunk, a
// span inside the one the processor holds its slot, so a count over -cap
// is a cap the replicas did not hold. -every prints a line per interval
// to stderr.
//
// It stops at -d or on SIGINT/SIGTERM, after the requests in flight end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "soakload: %v\n", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	addrs    []string
	sh       shape
	rate     float64
	d        time.Duration
	inflight int
	timeout  time.Duration
	cap      int
	every    time.Duration
}

func parse(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soakload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	addr := fs.String("addr", "127.0.0.1:8081", "ext_proc addresses, comma separated; requests go round-robin over them")
	fs.StringVar(&c.sh.model, "model", "soak", `the body's "model": the target`)
	fs.IntVar(&c.sh.chunks, "chunks", 4, "response body chunks per request (≥ 1)")
	fs.DurationVar(&c.sh.gap, "gap", 20*time.Millisecond, "time between response chunks")
	fs.Float64Var(&c.rate, "rate", 100, "requests per second, open loop")
	fs.DurationVar(&c.d, "d", 10*time.Second, "run duration")
	fs.IntVar(&c.inflight, "inflight", 512, "most requests open at once")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "deadline of one request's stream")
	fs.IntVar(&c.cap, "cap", 0, "the target's max_concurrent, to check the admitted count against (0: no check)")
	fs.DurationVar(&c.every, "every", 0, "print a progress line to stderr this often (0: none)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, a := range strings.Split(*addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.addrs = append(c.addrs, a)
		}
	}
	switch {
	case len(c.addrs) == 0:
		return c, errors.New("-addr: no address")
	case c.sh.model == "" || strings.ContainsAny(c.sh.model, `"\`):
		return c, fmt.Errorf("-model %q: empty or not a plain JSON string", c.sh.model)
	case c.sh.chunks < 1:
		return c, fmt.Errorf("-chunks %d: want at least 1", c.sh.chunks)
	case c.sh.gap < 0 || c.d <= 0 || c.timeout <= 0 || c.every < 0:
		return c, errors.New("-gap, -d, -timeout and -every must not be negative, -d and -timeout not zero")
	case c.rate <= 0 || c.inflight < 1:
		return c, fmt.Errorf("-rate %g and -inflight %d must be positive", c.rate, c.inflight)
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	clients := make([]extprocv3.ExternalProcessorClient, len(c.addrs))
	for i, a := range c.addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("dial %s: %w", a, err)
		}
		defer cc.Close()
		clients[i] = extprocv3.NewExternalProcessorClient(cc)
	}
	t := newTally(c.cap)
	stopProgress := t.progress(c.every, stderr)
	drive(ctx, c, clients, t)
	stopProgress()
	rep := t.report(c)
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if rep.Answers["ok"] == 0 {
		return errors.New("no request was admitted and completed")
	}
	return nil
}

// drive sends the requests on schedule until c.d has passed or ctx ends,
// then waits for those in flight. A stream's own context is ctx: a signal
// ends them too.
func drive(ctx context.Context, c config, clients []extprocv3.ExternalProcessorClient, t *tally) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, c.inflight)
	interval := time.Duration(float64(time.Second) / c.rate)
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= c.d {
			return
		}
		timer.Reset(time.Until(due))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			t.skip()
			continue
		}
		client := clients[i%len(clients)]
		wg.Go(func() {
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			t.add(exchange(sctx, client, c.sh, t.admit))
		})
	}
}
