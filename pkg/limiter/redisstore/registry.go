package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
	"github.com/redis/go-redis/v9"
)

// The replica registry: heartbeats, declared shrinks and leaving.

// errNotLive is a declaration of a replica the registry does not list as
// live.
var errNotLive = errors.New("replica not live in the registry")

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
// three numbers, its registry id and its declared shrink.
func membership(cmd *redis.Cmd) (limiter.Membership, error) {
	v, err := cmd.Slice()
	if err == nil && (len(v) < 4 || (len(v)-4)%5 != 0) {
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
	m := limiter.Membership{Replicas: int(max(n[1], 1)), Now: n[0], Since: n[2], Joined: n[3], Members: make([]limiter.Member, 0, (len(v)-4)/5)}
	for i := 4; i < len(v); i += 5 {
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
		d, _ := v[i+4].(string)
		m.Members = append(m.Members, limiter.Member{Joined: x[0], Expires: x[1], Caller: x[2]&1 != 0, Left: x[2]&2 != 0, Ahead: x[2]&4 != 0, DeclaresAhead: x[2]&8 != 0, Name: name,
			Shrink: parseDeclaration(d)})
	}
	return m, nil
}

// formatDeclaration writes a shrink as the registry keeps it, "at n
// until"; "" for none.
func formatDeclaration(d limiter.Declaration) string {
	if d.N <= 0 {
		return ""
	}
	return strconv.FormatInt(d.At, 10) + " " + strconv.Itoa(d.N) + " " + strconv.FormatInt(d.Until, 10)
}

// parseDeclaration reads formatDeclaration's form; anything else is no
// shrink, which counts the replica's shares whole.
func parseDeclaration(s string) limiter.Declaration {
	f := strings.Fields(s)
	if len(f) != 3 {
		return limiter.Declaration{}
	}
	at, err1 := strconv.ParseInt(f[0], 10, 64)
	n, err2 := strconv.Atoi(f[1])
	until, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || n <= 0 {
		return limiter.Declaration{}
	}
	return limiter.Declaration{At: at, N: n, Until: until}
}

// Declare records replica's shrink of its static shares in the registry,
// or withdraws it (the zero Declaration). A replica the registry does not
// list as live declares nothing: an error, so it does not count on it.
func (s *Store) Declare(ctx context.Context, replica string, d limiter.Declaration) error {
	cmds, err := s.evalRound(ctx, declareScript, []call{{keys: []string{s.keys.registry(), s.keys.joined()},
		args: []any{replica, formatDeclaration(d)}}})
	if err != nil {
		return wrap("declare", err)
	}
	ok, err := cmds[0].Int64()
	if err != nil {
		return fmt.Errorf("redisstore: declare: reply: %w", err)
	}
	if ok != 1 {
		return fmt.Errorf("redisstore: declare: %w", errNotLive)
	}
	return nil
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
