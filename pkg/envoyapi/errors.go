package envoyapi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errBadRequest marks a request that can never succeed as sent.
var errBadRequest = errors.New("bad request")

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
