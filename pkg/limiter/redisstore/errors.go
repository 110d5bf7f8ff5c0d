package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// wrap adds op to err, and limiter.ErrStoreUnavailable when err means
// Redis cannot serve the call.
func wrap(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("redisstore: %s: %w: %w", op, limiter.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("redisstore: %s: %w", op, err)
}

// unavailable classifies err, in the order of go-redis's own retry
// ladder: a canceled call is the caller's choice; a missed deadline, a
// broken or refused connection, a closed or exhausted pool, and the Redis
// errors of a server that is loading, failing over, out of memory or
// without a cluster quorum mean the store cannot be reached. Anything
// else (a script or configuration error) is not an outage.
func unavailable(err error) bool {
	switch {
	case errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err) || redis.IsOOMError(err) ||
		redis.HasErrorPrefix(err, "BUSY")
}
