package envoytest_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/envoyapi/envoytest"
)

// upperChunks answers headers with nothing and each response body chunk
// with the chunk in upper case, recording the chunks and their
// end_of_stream flags.
func upperChunks(got *[]string, eos *[]bool, hm *extprocv3.HeaderMutation) script {
	return func(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_ResponseBody:
			*got = append(*got, string(r.ResponseBody.GetBody()))
			*eos = append(*eos, r.ResponseBody.GetEndOfStream())
			cr := &extprocv3.CommonResponse{HeaderMutation: hm, BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_Body{Body: bytes.ToUpper(r.ResponseBody.GetBody())}}}
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
		}
		return answer(nil, false, nil, nil)(req)
	}
}

func TestStreamedResponseBody(t *testing.T) {
	var got []string
	var eos []bool
	f := filter(t, upperChunks(&got, &eos, nil))
	f.ResponseBodyMode, f.ChunkSize = extprocfilterv3.ProcessingMode_STREAMED, 4
	resp := func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200", "content-length", "10"), Body: []byte("data: abcd")}
	}
	x, err := f.RoundTrip(context.Background(), req, resp)
	if err != nil {
		t.Fatal(err)
	}
	if string(x.Response.Body) != "DATA: ABCD" {
		t.Errorf("body %q, want each chunk as answered", x.Response.Body)
	}
	if len(got) != 3 || got[0] != "data" || got[2] != "cd" || eos[0] || eos[1] || !eos[2] {
		t.Errorf("chunks %q end_of_stream %v, want 3 chunks of at most 4 bytes, the last one ending the stream", got, eos)
	}
	if x.Response.Headers.Has("content-length") {
		t.Error("content-length kept on a streamed body")
	}
}

func TestStreamedChunkHeaderMutation(t *testing.T) {
	var got []string
	var eos []bool
	hm := &extprocv3.HeaderMutation{SetHeaders: nil, RemoveHeaders: []string{"x-a"}}
	f := filter(t, upperChunks(&got, &eos, hm))
	f.ResponseBodyMode = extprocfilterv3.ProcessingMode_STREAMED
	resp := func(envoytest.Request) envoytest.Response {
		return envoytest.Response{Headers: envoytest.H(":status", "200"), Body: []byte("x")}
	}
	if _, err := f.RoundTrip(context.Background(), req, resp); !errors.Is(err, envoytest.ErrRejected) {
		t.Fatalf("err %v, want ErrRejected: the headers went on before the chunk", err)
	}
}

// TestStreamedStepByStep sends a streamed response one chunk at a time.
func TestStreamedStepByStep(t *testing.T) {
	var got []string
	var eos []bool
	f := filter(t, upperChunks(&got, &eos, nil))
	f.ResponseBodyMode = extprocfilterv3.ProcessingMode_STREAMED
	s, err := f.Open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Cancel()
	if _, _, err := s.SendRequest(req); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.SendResponseHeaders(envoytest.H(":status", "200"), true); err != nil {
		t.Fatal(err)
	}
	for i, c := range []string{"a", "b", "c"} {
		out, _, err := s.SendResponseChunk([]byte(c), i == 2)
		if err != nil || string(out) != string(bytes.ToUpper([]byte(c))) {
			t.Fatalf("chunk %d: %q %v", i, out, err)
		}
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if len(eos) != 3 || eos[1] || !eos[2] {
		t.Errorf("end_of_stream %v", eos)
	}
}
