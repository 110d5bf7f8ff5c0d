//go:build race

package limiter_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
