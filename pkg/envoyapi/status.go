package envoyapi

import (
	"context"
	"errors"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errBadRequest marks a request that can never succeed as sent.
var errBadRequest = errors.New("bad request")

// validate rejects what Envoy never sends and no limit can be found for.
func validate(req *ratelimitv3.RateLimitRequest) error {
	switch {
	case req.GetDomain() == "":
		return fmt.Errorf("%w: empty domain", errBadRequest)
	case len(req.GetDescriptors()) == 0:
		return fmt.Errorf("%w: no descriptors", errBadRequest)
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return fmt.Errorf("%w: descriptor %d has no entries", errBadRequest, i)
		}
	}
	return nil
}

// toStatus maps errors of this package to gRPC statuses: the one place
// where that happens.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
