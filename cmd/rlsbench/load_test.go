package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCountIsExact(t *testing.T) {
	addr, srv := startRLS(t, allowAll)
	rep := benchJSON(t, "-addr", addr, "-n", "1000", "-c", "8", "-keys", "10")

	calls, perKey, _ := srv.snapshot()
	if calls != 1000 || rep.Requests != 1000 || rep.OK != 1000 {
		t.Fatalf("server calls %d, report requests %d ok %d; want 1000 each", calls, rep.Requests, rep.OK)
	}
	for k := range 10 {
		if got := perKey[fmt.Sprintf("api_key=%d", k)]; got != 100 {
			t.Errorf("key %d sent %d times, want 100", k, got)
		}
	}
	if rep.OverLimit != 0 || rep.Errors != 0 || rep.Malformed != 0 {
		t.Errorf("over_limit %d errors %d malformed %d, want 0", rep.OverLimit, rep.Errors, rep.Malformed)
	}
	if rep.Latency.Count != 1000 || rep.Latency.P50 <= 0 || rep.Latency.P50 > rep.Latency.P99 || rep.Latency.P99 > rep.Latency.Max {
		t.Errorf("latency %+v: want 1000 samples, 0 < p50 <= p99 <= max", rep.Latency)
	}
	if a := rep.Accuracy; a.Offered != 1000 || a.Admitted != 1000 {
		t.Errorf("accuracy offered %d admitted %d, want 1000/1000", a.Offered, a.Admitted)
	}
}

func TestOverLimitAndAccuracy(t *testing.T) {
	addr, _ := startRLS(t, admitFirstPerKey(5))
	rep := benchJSON(t, "-addr", addr, "-n", "200", "-c", "4", "-keys", "10")

	if rep.OK != 50 || rep.OverLimit != 150 || rep.Errors != 0 {
		t.Fatalf("ok %d over_limit %d errors %d, want 50/150/0", rep.OK, rep.OverLimit, rep.Errors)
	}
	a := rep.Accuracy
	if a.Offered != 200 || a.Admitted != 50 {
		t.Fatalf("accuracy offered %d admitted %d, want 200/50", a.Offered, a.Admitted)
	}
	var offered, admitted uint64
	for _, row := range a.Seconds {
		offered += row.Offered
		admitted += row.Admitted
		if row.MaxKeyAdmitted > 5 || row.Keys > 10 || row.Admitted > row.Offered {
			t.Errorf("second %+v breaks the limit of 5 per key over 10 keys", row)
		}
	}
	if offered != 200 || admitted != 50 {
		t.Errorf("per-second rows sum to %d offered / %d admitted, want 200/50", offered, admitted)
	}
	if a.MaxKeyAdmitted < 1 || a.MaxKeyAdmitted > 5 || !strings.HasPrefix(a.MaxKey, "api_key=") {
		t.Errorf("max key %q admitted %d, want an api_key with 1..5", a.MaxKey, a.MaxKeyAdmitted)
	}
}

func TestEverySecondRequestRefused(t *testing.T) {
	var n atomic.Int64
	addr, _ := startRLS(t, func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		if n.Add(1)%2 == 0 {
			return answer(req, ratelimitv3.RateLimitResponse_OVER_LIMIT), nil
		}
		return answer(req, ratelimitv3.RateLimitResponse_OK), nil
	})
	rep := benchJSON(t, "-addr", addr, "-n", "301", "-c", "16", "-keys", "3")
	if rep.OK != 151 || rep.OverLimit != 150 {
		t.Fatalf("ok %d over_limit %d, want 151/150", rep.OK, rep.OverLimit)
	}
	if rep.Latency.Count != 301 {
		t.Errorf("latency samples %d, want 301 (answers of both kinds)", rep.Latency.Count)
	}
}

func TestErrorsByCode(t *testing.T) {
	addr, _ := startRLS(t, func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		switch descKey(req) {
		case "api_key=1":
			return nil, status.Error(codes.Unavailable, "replica down")
		case "api_key=2":
			return nil, status.Error(codes.ResourceExhausted, "too busy")
		}
		return allowAll(req)
	})
	rep := benchJSON(t, "-addr", addr, "-n", "40", "-c", "3", "-keys", "4")

	want := map[string]uint64{"Unavailable": 10, "ResourceExhausted": 10}
	if rep.Errors != 20 || rep.OK != 20 || len(rep.ErrorsByCode) != len(want) {
		t.Fatalf("errors %d ok %d by code %v; want 20, 20, %v", rep.Errors, rep.OK, rep.ErrorsByCode, want)
	}
	for code, n := range want {
		if rep.ErrorsByCode[code] != n {
			t.Errorf("errors_by_code[%s] = %d, want %d", code, rep.ErrorsByCode[code], n)
		}
	}
	if rep.Latency.Count != 20 {
		t.Errorf("latency samples %d, want 20 (failed calls left out)", rep.Latency.Count)
	}
	if a := rep.Accuracy; a.Offered != 40 || a.Admitted != 20 {
		t.Errorf("accuracy offered %d admitted %d, want 40/20", a.Offered, a.Admitted)
	}
}

func TestRoundRobinOverTwoServers(t *testing.T) {
	addrA, srvA := startRLS(t, allowAll)
	addrB, srvB := startRLS(t, admitFirstPerKey(2))
	rep := benchJSON(t, "-addr", addrA+","+addrB, "-n", "100", "-c", "4", "-keys", "5")

	for i, srv := range []*testRLS{srvA, srvB} {
		calls, perKey, _ := srv.snapshot()
		if calls != 50 {
			t.Errorf("server %d got %d calls, want 50", i, calls)
		}
		for k := range 5 {
			if got := perKey[fmt.Sprintf("api_key=%d", k)]; got != 10 {
				t.Errorf("server %d got key %d %d times, want 10", i, k, got)
			}
		}
	}
	want := []addrStats{
		{Addr: addrA, Requests: 50, OK: 50},
		{Addr: addrB, Requests: 50, OK: 10, OverLimit: 40},
	}
	if len(rep.PerAddress) != 2 || rep.PerAddress[0] != want[0] || rep.PerAddress[1] != want[1] {
		t.Errorf("per_address %+v, want %+v", rep.PerAddress, want)
	}
	if rep.OK != 60 || rep.OverLimit != 40 {
		t.Errorf("ok %d over_limit %d, want 60/40", rep.OK, rep.OverLimit)
	}
}

func TestHitsAndDescriptorsReachServer(t *testing.T) {
	addr, srv := startRLS(t, allowAll)
	benchJSON(t, "-addr", addr, "-n", "6", "-c", "2", "-keys", "3", "-hits", "7",
		"-domain", "llm", "-descriptor", "generic_key=llm,api_key={k};tenant=t{k}")

	_, perKey, hits := srv.snapshot()
	if hits[7] != 6 || len(hits) != 1 {
		t.Errorf("hits_addend seen %v, want 7 six times", hits)
	}
	for k := range 3 {
		key := fmt.Sprintf("generic_key=llm,api_key=%d;tenant=t%d", k, k)
		if perKey[key] != 2 {
			t.Errorf("descriptors %q seen %d times, want 2 (all: %v)", key, perKey[key], perKey)
		}
	}
}

func TestMalformedAnswersCounted(t *testing.T) {
	addr, _ := startRLS(t, func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		if descKey(req) == "api_key=0" {
			return &ratelimitv3.RateLimitResponse{OverallCode: ratelimitv3.RateLimitResponse_OK}, nil // no statuses
		}
		return answer(req, ratelimitv3.RateLimitResponse_UNKNOWN), nil
	})
	rep := benchJSON(t, "-addr", addr, "-n", "10", "-c", "2", "-keys", "2")
	if rep.OK != 10 || rep.Malformed != 10 {
		t.Errorf("ok %d malformed %d, want 10/10 (treated as admitted, like Envoy)", rep.OK, rep.Malformed)
	}
}

func TestOpenLoopPacing(t *testing.T) {
	addr, srv := startRLS(t, allowAll)
	rep := benchJSON(t, "-addr", addr, "-n", "100", "-c", "4", "-rate", "1000")

	if calls, _, _ := srv.snapshot(); calls != 100 || rep.Requests != 100 {
		t.Fatalf("calls %d requests %d, want 100", calls, rep.Requests)
	}
	// Request 99 is not sent before 99 ms after the start.
	if rep.DurationSeconds < 0.099 {
		t.Errorf("run took %.3fs, faster than the 1000 req/s schedule allows", rep.DurationSeconds)
	}
	if rep.Config.Rate != 1000 {
		t.Errorf("config rate %v, want 1000", rep.Config.Rate)
	}
}

func TestInterruptStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var n atomic.Int64
	addr, _ := startRLS(t, func(req *ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		if n.Add(1) == 50 {
			cancel() // as SIGINT would, while this request is in flight
		}
		return allowAll(req)
	})
	out, err := bench(t, ctx, "-addr", addr, "-d", "1h", "-c", "4", "-json")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	rep := decodeReport(t, out)
	if !rep.Interrupted || rep.Requests < 50 || rep.Errors != 0 {
		t.Errorf("interrupted %v requests %d errors %d; want true, >= 50, 0 (in-flight calls finish)",
			rep.Interrupted, rep.Requests, rep.Errors)
	}
	if rep.Requests != uint64(n.Load()) {
		t.Errorf("report counts %d requests, server saw %d", rep.Requests, n.Load())
	}
}

func TestNoAnswersIsAnError(t *testing.T) {
	addr, _ := startRLS(t, func(*ratelimitv3.RateLimitRequest) (*ratelimitv3.RateLimitResponse, error) {
		return nil, status.Error(codes.Internal, "broken")
	})
	out, err := bench(t, t.Context(), "-addr", addr, "-n", "5", "-c", "1")
	if !errors.Is(err, errNoAnswers) {
		t.Fatalf("err = %v, want errNoAnswers", err)
	}
	if !strings.Contains(string(out), "Internal 5") {
		t.Errorf("report does not show the errors:\n%s", out)
	}
}

func TestUnreachableAddress(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	start := time.Now()
	_, err = bench(t, t.Context(), "-addr", addr, "-n", "1")
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v, want a connect error naming %s", err, addr)
	}
	if time.Since(start) >= connectTimeout {
		t.Errorf("took %v, want a failure before the connect timeout", time.Since(start))
	}
}

func TestPIDsMeasured(t *testing.T) {
	addr, _ := startRLS(t, allowAll)
	rep := benchJSON(t, "-addr", addr, "-n", "50", "-pids", "1")
	if len(rep.CPU) != 2 || rep.CPU[0].Label != "rlsbench" || rep.CPU[1].PID != 1 {
		t.Fatalf("cpu %+v, want this process then pid 1", rep.CPU)
	}
	for _, u := range rep.CPU {
		if u.Error != "" || u.Seconds < 0 || u.Per100k < 0 {
			t.Errorf("cpu %+v", u)
		}
	}
}
