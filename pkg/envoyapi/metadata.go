package envoyapi

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

func dynamicMetadata(req *ratelimitv3.RateLimitRequest, b *batch) *structpb.Struct { return nil }
