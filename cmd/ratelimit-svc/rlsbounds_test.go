package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends bytes as they are: what a Go client would refuse to
// marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestRLSRequestBoundsServed: the service refuses a descriptor value
// over --rls-max-value-bytes and one that is not valid UTF-8 with
// INVALID_ARGUMENT naming the field.
func TestRLSRequestBoundsServed(t *testing.T) {
	s := start(t, "../../config", "--rls-max-value-bytes", "64")
	conn := s.dial(t)
	req := func(value string) *ratelimitv3.RateLimitRequest {
		return &ratelimitv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonv3.RateLimitDescriptor{{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}}}}}
	}
	_, err := ratelimitv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req(strings.Repeat("9", 65)))
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].entries[0].value: 65 bytes") {
		t.Errorf("a 65-byte value: %v, want INVALID_ARGUMENT naming it", err)
	}
	good, err := proto.Marshal(req("203.0.113.7"))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte("203.0.113.7"), []byte("203.0.\xff13.7"), 1)
	var out []byte
	err = conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &bad, &out,
		grpc.ForceCodec(rawCodec{}))
	if grpcstatus.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[0].entries[0].value: not valid UTF-8") {
		t.Errorf("invalid UTF-8: %v, want INVALID_ARGUMENT naming the field", err)
	}
}
