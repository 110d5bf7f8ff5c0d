//go:build race

package limiter_test

// raceDetector: this test binary was built with -race.
const raceDetector = true
