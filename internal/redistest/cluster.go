package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a running Redis Cluster of three masters and no replicas.
type Cluster struct {
	// Addrs are the masters' host:port.
	Addrs []string
	Nodes []*Server
}

// StartCluster runs three cluster-enabled redis-servers, joins them with
// redis-cli --cluster create, and waits until every node reports
// cluster_state:ok and knows all 16384 slots.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	cli := lookPath(tb, "redis-cli")
	c := &Cluster{}
	for i := range 3 {
		dir := tb.TempDir()
		s := startNode(tb, bin, true, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
			"--cluster-node-timeout", "5000",
		})
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, tail(string(out)))
	}
	for _, s := range c.Nodes {
		if err := waitClusterOK(ctx, s.Addr); err != nil {
			tb.Fatalf("redistest: cluster node %s: %v", s.Addr, err)
		}
	}
	return c
}

// Client returns a cluster client that does not retry, closed when the
// test ends.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, MaxRetries: -1})
	tb.Cleanup(func() { cc.Close() })
	return cc
}

func waitClusterOK(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var last string
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") &&
			strings.Contains(info, "cluster_slots_ok:16384") && strings.Contains(info, "cluster_known_nodes:3") {
			return nil
		}
		last = info
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok: %s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
