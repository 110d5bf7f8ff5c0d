package envoyapi

import (
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// RegisterRLS registers s as envoy.service.ratelimit.v3.RateLimitService.
func RegisterRLS(r grpc.ServiceRegistrar, s *RLS) {
	ratelimitv3.RegisterRateLimitServiceServer(r, s)
}
