package redisstore

import (
	"context"
	_ "embed"
	"errors"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/lib.lua
	libLua string
	//go:embed lua/record.lua
	recordLua string
	//go:embed lua/rate.lua
	rateLua string
	//go:embed lua/slots.lua
	slotsLua string
	//go:embed lua/heartbeat.lua
	heartbeatLua string
	//go:embed lua/leave.lua
	leaveLua string
	//go:embed lua/declare.lua
	declareLua string
)

// The scripts, each prefixed with the shared helpers; the rate script's
// first part, record.lua, reads and writes a key's record.
var (
	rateScript      = redis.NewScript(libLua + recordLua + rateLua)
	slotsScript     = redis.NewScript(libLua + slotsLua)
	heartbeatScript = redis.NewScript(libLua + heartbeatLua)
	leaveScript     = redis.NewScript(libLua + leaveLua)
	declareScript   = redis.NewScript(libLua + declareLua)
)

// noScriptTries bounds the reruns of calls refused with NOSCRIPT.
const noScriptTries = 3

// call is one script call of a round.
type call struct {
	keys []string
	args []any
}

// evalRound runs script once per call in one pipeline. Calls refused with
// NOSCRIPT (a restarted or flushed Redis, a new cluster node) are rerun
// after loading the script on every node, up to noScriptTries times (the
// cache may be flushed again between the load and the rerun); the others
// are not, as each has been applied. It returns the first error of any
// call.
func (s *Store) evalRound(ctx context.Context, script *redis.Script, calls []call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	s.evalPipeline(ctx, script, calls, cmds, nil)
	for range noScriptTries {
		var missing []int
		for i, c := range cmds {
			if isNoScript(c.Err()) {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			break
		}
		if err := script.Load(ctx, s.c).Err(); err != nil {
			return nil, err
		}
		s.evalPipeline(ctx, script, calls, cmds, missing)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// evalPipeline sends EVALSHA for the calls at idx (all when nil) in one
// pipeline, storing each command in cmds. Errors stay in the commands.
func (s *Store) evalPipeline(ctx context.Context, script *redis.Script, calls []call, cmds []*redis.Cmd, idx []int) {
	hash := script.Hash()
	s.sendCalls(ctx, len(calls), cmds, idx, func(pipe redis.Pipeliner, i int) *redis.Cmd {
		return pipe.EvalSha(ctx, hash, calls[i].keys, calls[i].args...)
	})
}

// sendCalls sends, in one pipeline, the command send adds for each of n
// calls at idx (all when nil), storing each in cmds.
func (s *Store) sendCalls(ctx context.Context, n int, cmds []*redis.Cmd, idx []int, send func(redis.Pipeliner, int) *redis.Cmd) {
	pipe := s.c.Pipeline()
	if idx == nil {
		for i := range n {
			cmds[i] = send(pipe, i)
		}
	} else {
		for _, i := range idx {
			cmds[i] = send(pipe, i)
		}
	}
	_, _ = pipe.Exec(ctx)
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
