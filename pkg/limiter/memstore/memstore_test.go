package memstore_test

import (
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/limitertest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter/memstore"
)

// TestStoreSuite runs the suite in synctest bubbles: the store's real
// clock and timers are the bubble's, so its waits take no real time.
func TestStoreSuite(t *testing.T) {
	limitertest.StoreSuiteInBubble(t, func(*testing.T) limiter.Store { return memstore.New(nil) })
}
