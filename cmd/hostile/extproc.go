package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// requestHeaders is a POST to target as Envoy's downstream ext_proc
// filter sends it; eos says the request has no body.
func requestHeaders(target string, eos bool) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{}
	for _, kv := range [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm"},
		{"content-type", "application/json"}, {"x-resil-target", target}} {
		hs = append(hs, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos}}}
}

// verdict names an ext_proc answer: "continue" for a request let
// through (with or without mutations), "reply <status>" for a local
// reply, or the gRPC code of a failed stream.
func verdict(resp *extprocv3.ProcessingResponse, err error) string {
	if err != nil {
		return status.Code(err).String()
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return fmt.Sprintf("reply %d", ir.GetStatus().GetCode())
	}
	return "continue"
}

// exchange sends req on s and reads the answer to it.
func exchange(s grpc.BidiStreamingClient[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse], req *extprocv3.ProcessingRequest) string {
	if err := s.Send(req); err != nil && err != io.EOF {
		return status.Code(err).String()
	}
	return verdict(s.Recv())
}

// bodyResult is the answer to a large buffered request body.
type bodyResult struct {
	Bytes   int    `json:"body_bytes"`
	Headers string `json:"headers_answer"`
	Body    string `json:"body_answer"`
}

func runBody(ctx context.Context, args []string, stderr io.Writer) (any, error) {
	fs := newFlags("body", stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address")
	target := fs.String("target", "big", "x-resil-target of the request")
	size := fs.Int("bytes", 6<<20, "bytes of the buffered JSON request body")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of the exchange")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	const head, tail = `{"model":"`, `","messages":[{"role":"user","content":"`
	if *size < len(head)+len(tail)+len(*target)+4 {
		return nil, fmt.Errorf("-bytes %d is too small for a JSON request", *size)
	}
	cc, err := dial(*addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(cc).Process(sctx)
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	res := bodyResult{Bytes: *size}
	res.Headers = exchange(s, requestHeaders(*target, false))
	fill := *size - len(head) - len(*target) - len(tail) - len(`"}]}`)
	body := head + *target + tail + strings.Repeat("x", fill) + `"}]}`
	res.Body = exchange(s, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
	_ = s.CloseSend()
	return res, nil
}

// stuckResult is how long a silent stream held a target's only slot.
type stuckResult struct {
	Taken     string   `json:"stuck_answer"`
	Probes    int      `json:"probes"`
	FreedSecs *float64 `json:"freed_after_s"` // null: not freed within WaitSecs
	WaitSecs  float64  `json:"waited_s"`
	Last      string   `json:"last_probe_answer"`
}

func runStuck(ctx context.Context, args []string, stderr io.Writer) (any, error) {
	fs := newFlags("stuck", stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address")
	target := fs.String("target", "slot", "x-resil-target of a target with max_concurrent: 1")
	wait := fs.Duration("wait", 30*time.Second, "how long the slot is watched")
	every := fs.Duration("every", 500*time.Millisecond, "time between probes")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := positive("wait", *wait); err != nil {
		return nil, err
	}
	cc, err := dial(*addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	client := extprocv3.NewExternalProcessorClient(cc)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // the stuck stream ends with the command
	s, err := client.Process(sctx)
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	res := stuckResult{Taken: exchange(s, requestHeaders(*target, true))}
	start := time.Now()
	t := time.NewTicker(*every)
	defer t.Stop()
	for time.Since(start) < *wait {
		res.Probes++
		res.Last = probeSlot(ctx, client, *target, *every*4)
		if res.Last == "continue" {
			secs := time.Since(start).Seconds()
			res.FreedSecs = &secs
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	res.WaitSecs = time.Since(start).Seconds()
	return res, nil
}

// probeSlot asks for target on a stream of its own, closed at once: the
// slot it may take goes back when it ends.
func probeSlot(ctx context.Context, c extprocv3.ExternalProcessorClient, target string, timeout time.Duration) string {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := c.Process(pctx)
	if err != nil {
		return status.Code(err).String()
	}
	v := exchange(s, requestHeaders(target, true))
	_ = s.CloseSend()
	return v
}
