package redisstore_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// rtParallel is how many parallel tests this package runs at once when
// -parallel is not given. The real-time tests marked parallel spend most
// of their run waiting for windows to begin and end on the wall clock,
// each against its own redis-server, so they overlap well beyond
// GOMAXPROCS (the default) on a small machine; the CPU-heavy and
// latency-measuring tests stay serial.
const rtParallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(rtParallel)); err != nil {
			fmt.Fprintln(os.Stderr, "redisstore tests:", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}
