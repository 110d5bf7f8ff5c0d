package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/policy"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/resilience"
)

type staticPolicies struct{ s *policy.Snapshot }

func (p staticPolicies) Current() *policy.Snapshot { return p.s }

// serve runs the ext_proc server on a loopback port with target soak
// capped at maxConcurrent, and returns its address.
func serve(t *testing.T, maxConcurrent string) string {
	t.Helper()
	snap := policy.Compile(policy.File{Name: "targets.yaml",
		Data: []byte("targets:\n  soak:\n    cluster: mock\n    max_concurrent: " + maxConcurrent + "\n")})
	if policy.HasErrors(snap.Problems()) || snap.Target("soak") == nil {
		t.Fatalf("policy: %v", snap.Problems())
	}
	lim := limiter.New()
	x := envoyapi.NewExtProc(staticPolicies{snap},
		envoyapi.ExtProcDeps{Limits: lim, Slots: lim, Breakers: resilience.NewRegistry()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	envoyapi.RegisterExtProc(s, x)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return ln.Addr().String()
}

func runLoad(t *testing.T, args ...string) report {
	t.Helper()
	var out, errs bytes.Buffer
	if err := run(context.Background(), args, &out, &errs); err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errs.String())
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	return r
}

// TestLoadTakesAndReleasesSlots: 200 requests at 200/s, each holding its
// slot over 3 chunks 20 ms apart, against a cap of 2: some are let
// through and stream to the end, others get the cap's 429, none fails,
// and never more than 2 are seen admitted at once.
func TestLoadTakesAndReleasesSlots(t *testing.T) {
	addr := serve(t, "2")
	r := runLoad(t, "-addr", addr, "-model", "soak", "-rate", "200", "-d", "1s", "-chunks", "3", "-gap", "20ms", "-cap", "2")
	if r.Sent != 200 || r.Skipped != 0 {
		t.Errorf("sent %d, skipped %d; want 200, 0", r.Sent, r.Skipped)
	}
	if r.Errors != 0 || r.Answers["ok"] == 0 || r.Answers["reply 429"] == 0 || r.Answers["ok"]+r.Answers["reply 429"] != r.Sent {
		t.Errorf("answers %v: want only ok and reply 429, both", r.Answers)
	}
	if r.MaxAdmitted != 2 || r.AdmitsOver != 0 {
		t.Errorf("max admitted at once %d, admits over the cap %d; want 2, 0", r.MaxAdmitted, r.AdmitsOver)
	}
}

// TestLoadSeesACapNotHeld checks the check: a server capping at 5000 is
// held to -cap 1, and the admits beyond it are counted.
func TestLoadSeesACapNotHeld(t *testing.T) {
	addr := serve(t, "5000")
	r := runLoad(t, "-addr", addr, "-rate", "200", "-d", "500ms", "-chunks", "3", "-gap", "20ms", "-cap", "1")
	if r.MaxAdmitted < 2 || r.AdmitsOver == 0 || r.Answers["reply 429"] != 0 {
		t.Errorf("max admitted %d, admits over %d, answers %v: want > 1, > 0 and no 429", r.MaxAdmitted, r.AdmitsOver, r.Answers)
	}
}

// TestErrorsAreCounted: with nothing listening every request is a gRPC
// error, and run fails since none was admitted.
func TestErrorsAreCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out, errs bytes.Buffer
	err = run(context.Background(), []string{"-addr", addr, "-rate", "50", "-d", "200ms", "-timeout", "2s"}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "no request was admitted") {
		t.Fatalf("run: %v, want no request admitted", err)
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Errors != r.Sent || r.Sent != 10 || r.Answers["error Unavailable"] != 10 {
		t.Errorf("sent %d, errors %d, answers %v: want 10 Unavailable", r.Sent, r.Errors, r.Answers)
	}
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-addr ,", "-addr"},
		{"-chunks 0", "-chunks"},
		{"-rate 0", "-rate"},
		{"-model a\"b", "-model"},
		{"-d -1s", "-d"},
		{"extra", "unexpected argument"},
	} {
		_, err := parse(strings.Fields(tc.args), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to name %s", tc.args, err, tc.want)
		}
	}
}
