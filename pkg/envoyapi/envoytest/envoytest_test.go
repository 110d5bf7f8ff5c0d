package envoytest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// script answers each message; a nil answer means none (the stream
// returns), so the emulator's reaction to any processor can be checked.
type script func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse

type scripted struct{ s script }

func (p scripted) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		resp := p.s(req)
		if resp == nil {
			return nil
		}
		if err := st.Send(resp); err != nil {
			return nil
		}
	}
}

func filter(t *testing.T, s script) *envoytest.Filter {
	t.Helper()
	conn := envoytest.Loopback(t, func(srv *grpc.Server) { extprocv3.RegisterExternalProcessorServer(srv, scripted{s}) })
	return &envoytest.Filter{Client: extprocv3.NewExternalProcessorClient(conn),
		RequestBodyMode: extprocfilterv3.ProcessingMode_BUFFERED, MessageTimeout: 2 * time.Second}
}

// answer replies to headers with hm (and clear) and to bodies with bm.
func answer(hm *extprocv3.HeaderMutation, clear bool, body []byte, bodyHM *extprocv3.HeaderMutation) script {
	return func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: hm, ClearRouteCache: clear}}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			cr := &extprocv3.CommonResponse{HeaderMutation: bodyHM}
			if body != nil {
				cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
			}
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: cr}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}
		}
		return nil
	}
}

func set(key string, value string, raw bool) *corev3.HeaderValueOption {
	hv := &corev3.HeaderValue{Key: key}
	if raw {
		hv.RawValue = []byte(value)
	} else {
		hv.Value = value
	}
	return &corev3.HeaderValueOption{Header: hv}
}

var req = envoytest.Request{Headers: envoytest.H(":method", "POST", ":authority", "a", "content-length", "2", "x-a", "1"), Body: []byte("{}")}

func ok(envoytest.Request) envoytest.Response {
	return envoytest.Response{Headers: envoytest.H(":status", "200")}
}

func TestRejections(t *testing.T) {
	cases := map[string]script{
		"value and raw_value": answer(&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: "x-b", Value: "1", RawValue: []byte("1")}}}}, false, nil, nil),
		"value only (strict)":              answer(&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-b", "1", false)}}, false, nil, nil),
		"x-envoy set (strict)":             answer(&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-envoy-retry-on", "5xx", true)}}, false, nil, nil),
		"pseudo-header removal (strict)":   answer(&extprocv3.HeaderMutation{RemoveHeaders: []string{":method"}}, false, nil, nil),
		"clear_route_cache alone (strict)": answer(nil, true, nil, nil),
		"content-length mismatch":          answer(nil, false, []byte(`{"a":1}`), nil),
		"invalid value":                    answer(&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-b", "a\r\nb", true)}}, false, nil, nil),
		"spurious kind": func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		},
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := filter(t, s).RoundTrip(context.Background(), req, ok)
			if !errors.Is(err, envoytest.ErrRejected) {
				t.Fatalf("err %v, want ErrRejected", err)
			}
		})
	}
}

func TestLenientCounts(t *testing.T) {
	hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		set("x-b", "1", false), set("x-envoy-x", "1", true), set("host", "h", true)}}
	f := filter(t, answer(hm, true, nil, nil))
	f.Lenient = true
	x, err := f.RoundTrip(context.Background(), req, ok)
	if err != nil {
		t.Fatal(err)
	}
	if v, present := x.Forwarded.Headers.Get("x-b"); !present || v != "" {
		t.Errorf("x-b = %q, want the empty string Envoy sets from value", v)
	}
	if x.Forwarded.Headers.Has("x-envoy-x") || x.Forwarded.Headers.Has("host") {
		t.Errorf("forbidden headers set: %v", x.Forwarded.Headers)
	}
	if !x.RouteCleared || x.Stats.RejectedMutations != 2 || x.Stats.ValueOnly != 1 {
		t.Errorf("cleared %v, stats %+v", x.RouteCleared, x.Stats)
	}
}

func TestMutationRules(t *testing.T) {
	hm := &extprocv3.HeaderMutation{
		RemoveHeaders: []string{"x-a"},
		SetHeaders: []*corev3.HeaderValueOption{
			set("x-b", "1", true),
			{Header: &corev3.HeaderValue{Key: "x-b", RawValue: []byte("2")}, Append: wrapperspb.Bool(true)},
			{Header: &corev3.HeaderValue{Key: "x-c", RawValue: []byte("3")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
			{Header: &corev3.HeaderValue{Key: "x-c", RawValue: []byte("4")}, AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
		}}
	bodyHM := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("content-length", "7", true)}}
	x, err := filter(t, answer(hm, true, []byte(`{"a":1}`), bodyHM)).RoundTrip(context.Background(), req, ok)
	if err != nil {
		t.Fatal(err)
	}
	h := x.Forwarded.Headers
	if h.Has("x-a") || len(h.Values("x-b")) != 2 || len(h.Values("x-c")) != 1 || h.Value("x-c") != "4" {
		t.Errorf("headers %v: want x-a removed, x-b appended, x-c overwritten (append_action ignored)", h)
	}
	if string(x.Forwarded.Body) != `{"a":1}` || !x.RouteCleared {
		t.Errorf("body %q cleared %v", x.Forwarded.Body, x.RouteCleared)
	}
}

func TestTimeoutAndEarlyClose(t *testing.T) {
	f := filter(t, func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(time.Second)}
	})
	f.MessageTimeout = 50 * time.Millisecond
	if _, err := f.RoundTrip(context.Background(), req, ok); !errors.Is(err, envoytest.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout: override_message_timeout is ignored by default", err)
	}
	x, err := filter(t, func(*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse { return nil }).
		RoundTrip(context.Background(), req, ok)
	if err != nil || string(x.Forwarded.Body) != "{}" || x.Forwarded.Headers.Value("x-a") != "1" {
		t.Fatalf("early close: %v %v, want the request unmodified", x.Forwarded, err)
	}
}
