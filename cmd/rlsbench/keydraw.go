package main

import "math/rand/v2"

// A run picks each request's key index in one of two ways. By default
// keys take turns (see loader.send), so every key gets the same share.
// With -zipf s each worker draws keys from its own Zipf stream, in which
// key k comes with a probability proportional to (k+1)^-s: key 0 is the
// most popular, key 1 comes 2^s times less often, and so on. Each
// worker's stream depends only on the seed and the worker's index, so a
// run with one worker sends the same keys in the same order every time.

// keyDraw is one worker's Zipf stream over key indexes 0..keys-1. It is
// owned by that worker.
type keyDraw struct {
	z *rand.Zipf
}

// newKeyDraw returns worker's stream, or nil when s is 0 (keys in turn).
// s must be 0 or greater than 1, and keys at least 1.
func newKeyDraw(s float64, keys int, seed uint64, worker int) *keyDraw {
	if s == 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, uint64(worker)))
	return &keyDraw{z: rand.NewZipf(r, s, 1, uint64(keys-1))}
}

// next returns the next key index.
func (d *keyDraw) next() int { return int(d.z.Uint64()) }
