package redisstore

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/ratelimit-svc/ratelimit-svc/internal/redistest"
	"github.com/ratelimit-svc/ratelimit-svc/pkg/limiter"
)

// TestLuaArithmetic holds the scripts' integer helpers to Go's: idiv to
// int64 division, muldiv to bits.Mul64 and bits.Div64, on random and
// extreme operands below 2^53, and the scripts' MAXEXACT to
// limiter.MaxExact.
func TestLuaArithmetic(t *testing.T) {
	const maxExact = limiter.MaxExact
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	if got, err := c.Eval(ctx, libLua+"\nreturn fmt(MAXEXACT)", nil).Text(); err != nil || got != u(maxExact) {
		t.Fatalf("lib.lua's MAXEXACT = %q (%v), want limiter.MaxExact %d", got, err, uint64(maxExact))
	}
	const probe = `
local out = {}
for i = 1, #ARGV, 3 do
  local a, b, c = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local q, r = muldiv(a, b, c)
  out[#out + 1] = fmt(q)
  out[#out + 1] = fmt(r)
  out[#out + 1] = fmt(idiv(a, c))
  out[#out + 1] = fmt(idiv(-a, c))
end
return out`
	rng := rand.New(rand.NewPCG(1, 2))
	type triple struct{ a, b, c uint64 }
	cases := []triple{
		{maxExact, 1, maxExact}, {maxExact, maxExact, maxExact}, {1<<40 - 1, 86_400_000_000, 86_400_000_000},
		{1 << 52, 1<<52 + 1, maxExact}, {0, 5, 7}, {7, 0, 3}, {maxExact - 1, maxExact - 2, maxExact},
		{4294967295, 31_536_000_000_000, 31_536_000_000_000}, {3, 1, 1},
	}
	for len(cases) < 3000 {
		c := 1 + rng.Uint64N(maxExact)
		a := rng.Uint64N(maxExact + 1)
		// b such that a·b/c < 2^53.
		b := rng.Uint64N(maxExact + 1)
		if hi, lo := bits.Mul64(a, b); hi >= c || func() bool { q, _ := bits.Div64(hi, lo, c); return q > maxExact }() {
			b = rng.Uint64N(c + 1)
			if a > c {
				a = rng.Uint64N(c + 1)
			}
		}
		cases = append(cases, triple{a, b, c})
	}
	for start := 0; start < len(cases); start += 500 {
		batch := cases[start:min(start+500, len(cases))]
		args := make([]any, 0, 3*len(batch))
		for _, tc := range batch {
			args = append(args, tc.a, tc.b, tc.c)
		}
		got, err := c.Eval(ctx, libLua+probe, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, tc := range batch {
			hi, lo := bits.Mul64(tc.a, tc.b)
			q, r := bits.Div64(hi, lo, tc.c)
			want := []string{u(q), u(r), i64(int64(tc.a) / int64(tc.c)), i64(-int64(tc.a) / int64(tc.c))}
			for j, w := range want {
				if got[4*i+j] != w {
					t.Fatalf("%+v: value %d = %s, want %s (all %v, want %v)", tc, j, got[4*i+j], w, got[4*i:4*i+4], want)
				}
			}
		}
	}
}
