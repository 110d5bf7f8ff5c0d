package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The rate script as a Redis Functions library (Redis 7 and later). Run
// with EVALSHA, a script makes its ~30 functions anew on every call
// (about 120 000 instructions, a tenth of a call of five keys, and the
// garbage they leave); loaded as a library, they are made at its first
// call and kept. The store runs the rate script as a function when it
// can, the library loaded on every master of a Cluster or shard of a
// Ring: a server before 7.0, or a user whose ACL does not allow FUNCTION
// LOAD or FCALL, falls back to EVALSHA for the Store's life. A Cluster's
// calls sync a key each, and save more (about 28 % of a one-key call).
//
// The library's name carries a hash of its code, so replicas of two
// versions of the service, as in a rolling upgrade, each load and call
// their own; a retired version's library stays loaded (a few kilobytes)
// until FUNCTION DELETE or FUNCTION FLUSH.

// rateFunction is the rate script as a library; when rate.lua cannot be
// made one (rateFunctionErr, which a test checks is nil), the rate script
// runs with EVALSHA.
var rateFunction, rateFunctionErr = newFunction("rate", libLua+recordLua+rateLua)

var errNoMain = errors.New(`redisstore: a function's script does not end with "return main(KEYS, ARGV)"`)

// function is a library of one function.
type function struct {
	lib  string // the library's code
	name string // the function FCALL calls
}

// newFunction makes a library of one function, name_<hash>, whose body
// is src: Lua defining main(keys, args) and calling it last, as
// "return main(KEYS, ARGV)". The definitions run at the function's first
// call, not when the library loads, whose code may use neither the
// standard libraries nor redis.call. src's line that asks for effects
// replication, the default for functions, is left out.
func newFunction(name, src string) (function, error) {
	defs, ok := strings.CutSuffix(strings.TrimRight(src, "\n"), "\nreturn main(KEYS, ARGV)")
	if !ok {
		return function{}, errNoMain
	}
	const replicate = "if redis.replicate_commands then redis.replicate_commands() end\n"
	defs = strings.Replace(defs, replicate, "", 1)
	sum := sha1.Sum([]byte(defs))
	id := name + "_" + hex.EncodeToString(sum[:8])
	fn := "rls_" + id
	lib := "#!lua name=rls_lib_" + id + "\n" +
		"local main\n" +
		"redis.register_function('" + fn + "', function(keys, args)\n" +
		"  if not main then\n" +
		"    main = (function()\n" + defs + "\n      return main\n    end)()\n" +
		"  end\n" +
		"  return main(keys, args)\n" +
		"end)\n"
	return function{lib: lib, name: fn}, nil
}

// load loads f's library on every server c talks to: a single node's
// one, every master of a Cluster, every shard of a Ring. One loaded
// already counts as loaded.
func (f function) load(ctx context.Context, c rediser) error {
	one := func(ctx context.Context, n *redis.Client) error {
		err := n.FunctionLoad(ctx, f.lib).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	switch c := c.(type) {
	case *redis.Client:
		return one(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, one)
	case *redis.Ring:
		return c.ForEachShard(ctx, one)
	}
	return errNoLoad
}

var errNoLoad = errors.New("redisstore: a client of no known kind: the rate function is not loaded")

// isNoFunction reports the error of an FCALL of a function the server
// does not hold: loaded on a server since restarted, flushed or failed
// over to, it is loaded again.
func isNoFunction(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found") // "ERR Function not found"
}

// refusesFunctions reports an error that says the server will not run
// functions for this client, which leaves the call unapplied: an unknown
// command (FUNCTION and FCALL came with Redis 7.0) or one its ACL denies.
func refusesFunctions(err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(err.Error())
	if strings.HasPrefix(msg, "noperm") {
		return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function")
	}
	return strings.HasPrefix(msg, "err unknown command") || strings.HasPrefix(msg, "err unknown subcommand")
}

// rateRound runs the rate script once per call in one pipeline: as a
// function where the server runs them, else with EVALSHA (evalRound).
// Calls refused with "Function not found" (a restarted, flushed or new
// server) are rerun after loading the library, up to noScriptTries
// times; calls the server refuses to run as functions are rerun with
// EVALSHA, which the Store uses from then on. The others are not, as
// each has been applied. It returns the first error of any call.
func (s *Store) rateRound(ctx context.Context, calls []call) ([]*redis.Cmd, error) {
	if s.noFunctions.Load() || rateFunctionErr != nil {
		return s.evalRound(ctx, rateScript, calls)
	}
	cmds := make([]*redis.Cmd, len(calls))
	s.fcallPipeline(ctx, calls, cmds, nil)
	for range noScriptTries {
		missing, refused := unrun(cmds)
		if len(missing) == 0 {
			break
		}
		if !refused {
			err := rateFunction.load(ctx, s.c)
			if err != nil && !refusesFunctions(err) && !errors.Is(err, errNoLoad) {
				return nil, err
			}
			refused = err != nil
		}
		if refused {
			s.noFunctions.Store(true)
			if err := s.rerunEval(ctx, calls, cmds, missing); err != nil {
				return nil, err
			}
			break
		}
		s.fcallPipeline(ctx, calls, cmds, missing)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// unrun lists the calls whose FCALL did not run: the function not found,
// or functions refused (refused).
func unrun(cmds []*redis.Cmd) (missing []int, refused bool) {
	for i, c := range cmds {
		switch err := c.Err(); {
		case isNoFunction(err):
			missing = append(missing, i)
		case refusesFunctions(err):
			missing, refused = append(missing, i), true
		}
	}
	return missing, refused
}

// rerunEval runs the calls at idx with EVALSHA, in cmds.
func (s *Store) rerunEval(ctx context.Context, calls []call, cmds []*redis.Cmd, idx []int) error {
	again := make([]call, len(idx))
	for j, i := range idx {
		again[j] = calls[i]
	}
	done, err := s.evalRound(ctx, rateScript, again)
	if err != nil {
		return err
	}
	for j, i := range idx {
		cmds[i] = done[j]
	}
	return nil
}

// fcallPipeline sends FCALL of the rate function for the calls at idx
// (all when nil) in one pipeline, storing each command in cmds. Errors
// stay in the commands.
func (s *Store) fcallPipeline(ctx context.Context, calls []call, cmds []*redis.Cmd, idx []int) {
	s.sendCalls(ctx, len(calls), cmds, idx, func(pipe redis.Pipeliner, i int) *redis.Cmd {
		return pipe.FCall(ctx, rateFunction.name, calls[i].keys, calls[i].args...)
	})
}
