package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package if goroutines started by the tests are
// still running once every test and its cleanups have finished.
func TestMain(m *testing.M) {
	base := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if err := checkGoroutines(base, 5*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// checkGoroutines polls until the goroutine count is back to base or the
// deadline passes; closed connections take a moment to unwind.
func checkGoroutines(base int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			stacks := string(buf[:runtime.Stack(buf, true)])
			return fmt.Errorf("%d goroutines left running (started with %d):\n%s", n, base, strings.TrimSpace(stacks))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
