package envoytest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// TestRouteRetries: the router keeps one header map for every attempt,
// counts attempts, sends the original body each time, stops at
// num_retries, and waits the reset header only up to max_interval.
func TestRouteRetries(t *testing.T) {
	seen := 0
	f := filter(t, func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			seen++
			hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-seen-"+strconv.Itoa(seen), "1", true)}}
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: hm}}}}
		}
		return answer(nil, false, []byte(`{"b":2}`), &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{set("content-length", "7", true)}})(req)
	})
	p := envoytest.RetryPolicy{NumRetries: 2, RetriableHeader: "x-retry", RetriableValue: "1",
		ResetHeader: "x-after", MaxInterval: 10 * time.Second}
	afters := []string{"3", "11"}
	in := envoytest.Request{Headers: envoytest.H(":method", "POST", "content-length", "7"), Body: []byte(`{"a":1}`)}
	as, err := envoytest.Route(context.Background(), f, p, in, func(n int, fwd envoytest.Request) envoytest.Response {
		if string(fwd.Body) != `{"b":2}` {
			t.Errorf("attempt %d body %s", n, fwd.Body)
		}
		if fwd.Headers.Value("x-envoy-attempt-count") != strconv.Itoa(n) {
			t.Errorf("attempt %d: count %q", n, fwd.Headers.Value("x-envoy-attempt-count"))
		}
		if n > 1 && !fwd.Headers.Has("x-seen-"+strconv.Itoa(n-1)) {
			t.Errorf("attempt %d lost the mutation of attempt %d: %v", n, n-1, fwd.Headers)
		}
		h := envoytest.H(":status", "503", "x-retry", "1")
		if n <= len(afters) {
			h = h.Add("x-after", afters[n-1])
		}
		return envoytest.Response{Headers: h}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 3 {
		t.Fatalf("%d attempts, want 3 (num_retries 2)", len(as))
	}
	if as[1].Wait != 3*time.Second || as[1].Backoff {
		t.Errorf("attempt 2 waited %v backoff %v, want 3 s", as[1].Wait, as[1].Backoff)
	}
	if as[2].Wait != 0 || !as[2].Backoff {
		t.Errorf("attempt 3 waited %v backoff %v, want the backoff (11 s is above max_interval)", as[2].Wait, as[2].Backoff)
	}
}

// TestRouteClustersReselects: with refresh_cluster_on_retry the cluster
// specifier runs again before each retry, on the headers an earlier
// attempt's filter wrote; without it the first cluster stays.
func TestRouteClustersReselects(t *testing.T) {
	next := map[string]string{"a": "b", "b": "c", "c": "c"}
	var filters []string
	filterOf := func(cluster string) *envoytest.Filter {
		filters = append(filters, cluster)
		return filter(t, func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			if _, ok := req.GetRequest().(*extprocv3.ProcessingRequest_RequestHeaders); ok {
				hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-cluster", next[cluster], true)}}
				return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
					RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: hm}}}}
			}
			return answer(nil, false, nil, nil)(req)
		})
	}
	in := envoytest.Request{Headers: envoytest.H(":method", "GET", "x-cluster", "a")}
	for _, refresh := range []bool{true, false} {
		filters = nil
		p := envoytest.RetryPolicy{NumRetries: 2, RetriableHeader: "x-retry", RetriableValue: "1", RefreshClusterOnRetry: refresh,
			Cluster: func(h envoytest.Headers) string { return h.Value("x-cluster") }}
		as, err := envoytest.RouteClusters(context.Background(), filterOf, p, in, func(n int, cluster string, _ envoytest.Request) envoytest.Response {
			return envoytest.Response{Headers: envoytest.H(":status", "503", "x-retry", "1")}
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, a := range as {
			got = append(got, a.Cluster)
		}
		want := []string{"a", "b", "c"}
		if !refresh {
			want = []string{"a", "a", "a"}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || strings.Join(filters, ",") != strings.Join(want, ",") {
			t.Errorf("refresh %v: attempts in %v through filters %v, want %v", refresh, got, filters, want)
		}
	}
}
