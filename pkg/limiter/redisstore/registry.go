package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/redis/go-redis/v9"
)

// The replica registry: heartbeats and leaving.

// Heartbeat renews replica's lease in the registry, forgets the replicas
// whose lease ended over a day ago (25 h, at most 1024 remembered), and
// lists the others.
func (s *Store) Heartbeat(ctx context.Context, replica string, lease time.Duration) (limiter.Membership, error) {
	cmds, err := s.evalRound(ctx, heartbeatScript, []call{{
		keys: []string{s.keys.registry(), s.keys.joined()}, args: []any{replica, micros(lease)},
	}})
	if err != nil {
		return limiter.Membership{}, wrap("heartbeat", err)
	}
	m, err := membership(cmds[0])
	if err != nil {
		return limiter.Membership{}, fmt.Errorf("redisstore: heartbeat: reply: %w", err)
	}
	return m, nil
}

// membership reads heartbeat.lua's reply: four numbers, then per member
// three numbers and its registry id.
func membership(cmd *redis.Cmd) (limiter.Membership, error) {
	v, err := cmd.Slice()
	if err == nil && (len(v) < 4 || (len(v)-4)%4 != 0) {
		err = fmt.Errorf("%d values", len(v))
	}
	if err != nil {
		return limiter.Membership{}, err
	}
	var n [4]int64
	for i := range n {
		if n[i], err = int64Of(v[i]); err != nil {
			return limiter.Membership{}, err
		}
	}
	m := limiter.Membership{Replicas: int(max(n[1], 1)), Now: n[0], Since: n[2], Joined: n[3], Members: make([]limiter.Member, 0, (len(v)-4)/4)}
	for i := 4; i < len(v); i += 4 {
		var x [3]int64
		for j := range x {
			if x[j], err = int64Of(v[i+j]); err != nil {
				return limiter.Membership{}, err
			}
		}
		id, ok := v[i+3].(string)
		if !ok {
			return limiter.Membership{}, fmt.Errorf("member id: %T", v[i+3])
		}
		name, _, _ := strings.Cut(id, "\x00")
		m.Members = append(m.Members, limiter.Member{Joined: x[0], Expires: x[1], Caller: x[2]&1 != 0, Left: x[2]&2 != 0, Name: name})
	}
	return m, nil
}

func int64Of(v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("%T, not an integer", v)
}

// Leave ends replica's lease now and marks it as gone (Member.Left); the
// registry remembers it until a heartbeat forgets it.
func (s *Store) Leave(ctx context.Context, replica string) error {
	_, err := s.leave(ctx, replica)
	return err
}

// leave is Leave, returning the store clock's instant it applied at.
func (s *Store) leave(ctx context.Context, replica string) (int64, error) {
	cmds, err := s.evalRound(ctx, leaveScript, []call{{keys: []string{s.keys.registry(), s.keys.joined()}, args: []any{replica}}})
	if err != nil {
		return 0, wrap("leave", err)
	}
	now, err := cmds[0].Int64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: leave: reply: %w", err)
	}
	return now, nil
}
