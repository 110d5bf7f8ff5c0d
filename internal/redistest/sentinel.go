package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel runs a Redis Sentinel that monitors master under the name
// masterName, and waits until it reports the master's address.
func StartSentinel(tb testing.TB, master *Server, masterName string) *Server {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	conf := filepath.Join(tb.TempDir(), "sentinel.conf")
	host, port, _ := splitAddr(master.Addr)
	body := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 5000\n", masterName, host, port, masterName)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	s := startNode(tb, bin, false, []string{conf, "--sentinel"})
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		addr, err := c.GetMasterAddrByName(ctx, masterName).Result()
		if err == nil && len(addr) == 2 && addr[1] == port {
			return s
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("redistest: sentinel does not know master %s: %v", masterName, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
