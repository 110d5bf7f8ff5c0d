package redisstore

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// costReplicas take turns calling, so each key holds their reservations
// or share records, as on a fleet.
const costReplicas = 4

// costReps is how many times each script runs on a case's calls: the
// least time is the one least disturbed by other work on the machine.
const costReps = 7

// costCase is one kind of item, synced keys at a time per script call.
type costCase struct {
	name string
	keys int
	item func(now int64) limiter.SyncItem
}

func costCases() []costCase {
	// A lease longer than a measurement, so that no key's record lapses
	// between its calls (under callgrind, a case takes seconds).
	lease := time.Minute
	fixed := func(now int64) limiter.SyncItem {
		return limiter.SyncItem{Windows: []limiter.Window{{Limit: 100000, Period: time.Hour}}, Want: 10,
			Replicas: costReplicas, Lease: lease, Hits: []limiter.Hit{{At: now, N: 1}}}
	}
	shared := func(now int64) limiter.SyncItem {
		p := micros(time.Hour)
		return limiter.SyncItem{Windows: []limiter.Window{{Limit: 100000, Period: time.Hour}},
			Replicas: costReplicas, Lease: lease, ShareEpoch: now / p, Sharers: costReplicas, SharersNext: costReplicas,
			ShareHits: []limiter.Hit{{At: now, N: 1}}}
	}
	// As a key of workload B syncs (scripts/many-keys.sh): its share hits
	// and a want, with the floor of its last view and its share floor.
	asB := func(now int64) limiter.SyncItem {
		it := shared(now)
		e := now / micros(time.Hour)
		it.Want = 2
		it.Floor, it.FloorGen = []limiter.WindowState{{Epoch: e, Cur: 3}}, 0
		it.ShareFloor = limiter.WindowState{Epoch: e, Cur: 1}
		return it
	}
	sliding := func(now int64) limiter.SyncItem {
		it := fixed(now)
		it.Algorithm = limiter.SlidingWindow
		return it
	}
	bucket := func(now int64) limiter.SyncItem {
		it := fixed(now)
		it.Algorithm = limiter.TokenBucket
		it.Windows[0].Burst = 1000
		return it
	}
	return []costCase{
		{"fixed window", 1, fixed},
		{"fixed window, static shares", 1, shared},
		{"sliding window", 1, sliding},
		{"token bucket", 1, bucket},
		{"fixed window, 32 keys a call", 32, fixed},
		{"fixed window, 100 keys a call", 100, fixed},
		{"static shares, 100 keys a call", 100, shared},
		{"static shares as workload B, 5 keys a call", 5, asB},
	}
}

// costVariant is a script measured on a case's calls: a script run with
// EVALSHA, or a library of Redis Functions (7.0 and later) whose function
// is run with FCALL.
type costVariant struct {
	name, src string
	function  string // the function FCALL calls; empty: a script
}

// costVariants are the scripts measured on a case's calls, each adding a
// part of the rate script to the one before, the commands alone, and the
// rate script as the function the store calls (functions.go).
func costVariants(tb testing.TB) []costVariant {
	defs, _, ok := strings.Cut(rateLua, "\nreturn main(KEYS, ARGV)")
	if !ok {
		tb.Fatal("rate.lua: no main call")
	}
	if rateFunctionErr != nil {
		tb.Fatal(rateFunctionErr)
	}
	const commands = `
local now = clock()
for k = 1, #KEYS do
  local key = KEYS[k]
  local flat = redis.call('HGETALL', key)
  local w, x
  for i = 1, #flat, 2 do
    if flat[i] == 'w' then w = flat[i + 1] elseif flat[i] == 'x' then x = flat[i + 1] end
  end
  redis.call('HSET', key, 'w', w, 'x', x)
  redis.call('PEXPIREAT', key, ceilms(tonumber(x) + 1000000))
end
return 0`
	return []costVariant{
		{name: "EVALSHA of `return 0`", src: "return 0"},
		{name: "+ lib.lua", src: libLua + "\nreturn 0"},
		{name: "+ TIME", src: libLua + "\nlocal now = clock()\nreturn 0"},
		{name: "+ rate.lua's definitions", src: libLua + recordLua + defs + "\nlocal now = clock()\nreturn 0"},
		{name: "rate.lua", src: libLua + recordLua + rateLua},
		{name: "TIME, HGETALL, HSET w x, PEXPIREAT", src: libLua + commands},
		{name: "rate.lua as a function (FCALL)", src: rateFunction.lib, function: rateFunction.name},
	}
}

var (
	costCallgrind = flag.Bool("callgrind", false,
		"BenchmarkScriptCost: count the instructions redis-server runs under valgrind's callgrind instead of its time")
	costBaselineDir = flag.String("baseline", "",
		"BenchmarkScriptCost: a folder with another revision's lib.lua, rate.lua and record.lua, measured beside this one")
)

// BenchmarkScriptCost measures what a rate script call costs Redis, for
// each kind of item (costCases) and each part of the script
// (costVariants): one sub-benchmark per pair, each of its b.N runs a
// pass of the case's calls on a fresh Lua state. It reports Redis's own
// accounting, the least of the runs: redis-µs/call (INFO commandstats'
// µs of EVALSHA or FCALL) and redis-cpu-µs/call (used_cpu_user+sys);
// with -callgrind, kinstr/call, the thousands of instructions
// redis-server executes for a call (scriptcost_callgrind_test.go). With
// -baseline, another revision's rate script is measured beside this one.
// It fails when a call was not applied or a reply of the rate script does
// not read as a sync result.
func BenchmarkScriptCost(b *testing.B) {
	var cg *callgrind
	var c *redis.Client
	if *costCallgrind {
		cg, c = startCallgrind(b)
	} else {
		c = redistest.Start(b).Client(b)
	}
	variants := costVariants(b)
	if base, ok := costBaseline(b, *costBaselineDir); ok {
		variants = append(variants, base)
	}
	for i, cc := range costCases() {
		b.Run(cc.name, func(b *testing.B) {
			calls := costCalls(b, c, fmt.Sprint("cost", i), cc)
			for _, v := range variants {
				b.Run(v.name, func(b *testing.B) { costBench(b, cg, c, v, calls) })
			}
		})
	}
}

// costBench is one sub-benchmark of BenchmarkScriptCost: v on calls.
func costBench(b *testing.B, cg *callgrind, c *redis.Client, v costVariant, calls []call) {
	if cg != nil {
		var n float64
		for range b.N {
			n = costCount(b, cg, c, v, calls[:min(len(calls), callgrindCalls)])
		}
		b.ReportMetric(n, "kinstr/call")
		return
	}
	us, cpu := costRun(b, c, v, calls, b.N)
	b.ReportMetric(us, "redis-µs/call")
	b.ReportMetric(cpu, "redis-cpu-µs/call")
}

// costCalls builds 2000 keys' worth of calls of cc (4000 for batches),
// replicas taking turns, and applies them twice so every key holds each
// replica's reservation or share record.
func costCalls(tb testing.TB, c *redis.Client, service string, cc costCase) []call {
	ctx := context.Background()
	now, err := c.Time(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	s := New(c, service)
	keys := 2000
	if cc.keys > 1 {
		keys = 4000
	}
	var calls []call
	var items [][]limiter.SyncItem
	for k := 0; k < keys; k += cc.keys {
		var cl call
		its := make([]limiter.SyncItem, cc.keys)
		ra := rateArgs{args: []any{fmt.Sprint("replica-", len(calls)%costReplicas)}}
		for j := range cc.keys {
			it := &its[j]
			*it = cc.item(now.UnixMicro())
			it.Key = fmt.Sprint("user=", k+j)
			cl.keys = append(cl.keys, s.keys.rate(it.Key))
			ra.add(it)
		}
		cl.args = ra.args
		calls, items = append(calls, cl), append(items, its)
	}
	out := make([]limiter.SyncResult, cc.keys)
	for range costReplicas {
		cmds, err := s.evalRound(ctx, rateScript, calls)
		if err != nil {
			tb.Fatal(err)
		}
		for i, cmd := range cmds {
			if err := decodeSyncs(cmd, items[i], out); err != nil {
				tb.Fatal(err)
			}
		}
		// The next replica's turn.
		calls, items = append(calls[1:], calls[0]), append(items[1:], items[0])
	}
	return calls
}

// costRun runs v once per call, reps times, and returns the least mean
// Redis time of a call (commandstats' usec of EVALSHA or FCALL, which
// counts the commands the script runs) and Redis CPU (user + sys) per
// call in the same run, in µs.
func costRun(tb testing.TB, c *redis.Client, v costVariant, calls []call, reps int) (us, cpu float64) {
	tb.Helper()
	ctx := context.Background()
	us, cpu = math.Inf(1), math.Inf(1)
	for range reps {
		sha := loadFresh(tb, c, v) // a fresh Lua state: no run pays for another's garbage
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			tb.Fatal(err)
		}
		cpu0 := costCPU(tb, c)
		for from := 0; from < len(calls); from += 50 {
			pipe := c.Pipeline()
			for _, cl := range calls[from:min(from+50, len(calls))] {
				if v.function != "" {
					pipe.FCall(ctx, v.function, cl.keys, cl.args...)
				} else {
					pipe.EvalSha(ctx, sha, cl.keys, cl.args...)
				}
			}
			if _, err := pipe.Exec(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		cpu = min(cpu, (costCPU(tb, c)-cpu0)*1e6/float64(len(calls)))
		cmd := "evalsha"
		if v.function != "" {
			cmd = "fcall"
		}
		n, total := costStat(tb, c, cmd)
		if n != len(calls) {
			tb.Fatalf("%s: %d %s counted for %d calls", v.name, n, cmd, len(calls))
		}
		us = min(us, total/float64(n))
	}
	return us, cpu
}

// costStat reads the calls and total µs of cmd from INFO commandstats.
func costStat(tb testing.TB, c *redis.Client, cmd string) (int, float64) {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		var n int
		var usec float64
		if _, err := fmt.Sscanf(rest, "calls=%d,usec=%g,", &n, &usec); err != nil {
			tb.Fatalf("commandstats %q: %v", line, err)
		}
		return n, usec
	}
	return 0, 0
}

// costCPU reads Redis's used_cpu_user + used_cpu_sys, in seconds.
func costCPU(tb testing.TB, c *redis.Client) float64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			var s float64
			if _, err := fmt.Sscan(v, &s); err != nil {
				tb.Fatalf("INFO cpu %q: %v", line, err)
			}
			sum += s
		}
	}
	return sum
}

// loadFresh empties Redis's scripts and functions, so the Lua state is
// new, and loads v: a function, or a script whose SHA it returns.
func loadFresh(tb testing.TB, c *redis.Client, v costVariant) string {
	tb.Helper()
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	if v.function != "" {
		if err := c.FunctionLoad(ctx, v.src).Err(); err != nil {
			tb.Fatalf("%s: %v", v.name, err)
		}
		return ""
	}
	sha, err := c.ScriptLoad(ctx, v.src).Result()
	if err != nil {
		tb.Fatalf("%s: %v", v.name, err)
	}
	return sha
}
