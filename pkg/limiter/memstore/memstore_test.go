package memstore_test

import (
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

func TestStoreSuite(t *testing.T) {
	limitertest.StoreSuite(t, func(*testing.T) limiter.Store { return memstore.New(nil) })
}
