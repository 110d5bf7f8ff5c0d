package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	ratelimitcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// shouldRateLimit is the RLS method's full name.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// maxMsg is the largest message the tool sends or reads.
const maxMsg = 64 << 20

// dial opens a client connection to addr over plain h2c.
func dial(addr string) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}

// entries builds a descriptor of key=value pairs.
func entries(kv ...string) *ratelimitcommon.RateLimitDescriptor {
	d := &ratelimitcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// yearsOverride is a limit override of 10 per 100 years: a window that
// outlives everything, as a hostile client would ask for.
func yearsOverride() *ratelimitcommon.RateLimitDescriptor_RateLimitOverride {
	return &ratelimitcommon.RateLimitDescriptor_RateLimitOverride{
		RequestsPerUnit: 10,
		Unit:            typev3.RateLimitUnit_YEAR,
		UnitMultiplier:  wrapperspb.UInt32(100),
	}
}

// answer names a call's outcome: the gRPC code, and for OK the overall
// RLS code, as "OK/OVER_LIMIT" or "InvalidArgument".
func answer(resp *ratelimitv3.RateLimitResponse, err error) string {
	if err != nil {
		return status.Code(err).String()
	}
	return "OK/" + resp.GetOverallCode().String()
}

// rawCodec sends a message given as *rawMessage byte for byte and
// otherwise marshals protobuf: a client can put bytes on the wire that
// proto.Marshal refuses, such as a string field that is not UTF-8.
type rawCodec struct{}

// rawMessage is an already encoded request.
type rawMessage struct{ b []byte }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T is not a message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("raw codec: %w", err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("raw codec: %T is not a message", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}

func (rawCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = rawCodec{}

// invalidUTF8Request is a request whose one descriptor value holds the
// bytes 0xff 0xfe, which no UTF-8 string contains.
func invalidUTF8Request(domain string) (*rawMessage, error) {
	const mark = "hostile-utf8-XX"
	req := &ratelimitv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitcommon.RateLimitDescriptor{entries("hostile", mark)}}
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	bad := []byte(mark)
	copy(bad[len(bad)-2:], "\xff\xfe")
	return &rawMessage{b: bytes.Replace(b, []byte(mark), bad, 1)}, nil
}

// codesResult is what the service answered to each malformed request.
type codesResult struct {
	Override string `json:"override_year_x100"`
	Value    string `json:"value_bytes"`
	UTF8     string `json:"invalid_utf8"`
	Bytes    int    `json:"value_size"`
}

func runCodes(ctx context.Context, args []string, stderr io.Writer) (any, error) {
	fs := newFlags("codes", stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address")
	domain := fs.String("domain", "hostile", "RLS domain")
	size := fs.Int("value-bytes", 4<<20-64<<10, "bytes of the large descriptor value (under gRPC's default 4 MiB message)")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of each call")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := positive("value-bytes", *size); err != nil {
		return nil, err
	}
	cc, err := dial(*addr)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	c := ratelimitv3.NewRateLimitServiceClient(cc)
	call := func(req *ratelimitv3.RateLimitRequest) string {
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return answer(c.ShouldRateLimit(cctx, req))
	}
	over := entries("hostile", "override")
	over.Limit = yearsOverride()
	res := codesResult{Bytes: *size}
	res.Override = call(&ratelimitv3.RateLimitRequest{Domain: *domain, Descriptors: []*ratelimitcommon.RateLimitDescriptor{over}})
	big := entries("hostile", strings.Repeat("v", *size))
	res.Value = call(&ratelimitv3.RateLimitRequest{Domain: *domain, Descriptors: []*ratelimitcommon.RateLimitDescriptor{big}})
	raw, err := invalidUTF8Request(*domain)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	out := new(ratelimitv3.RateLimitResponse)
	err = cc.Invoke(cctx, shouldRateLimit, raw, out, grpc.ForceCodecV2(rawCodec{}))
	res.UTF8 = answer(out, err)
	return res, nil
}
