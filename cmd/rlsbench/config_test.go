package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFlagDefaults(t *testing.T) {
	cfg, err := parseBenchFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.duration != defaultDuration || cfg.count != 0 || cfg.concurrency != 16 || cfg.hits != 1 || cfg.rate != 0 {
		t.Errorf("defaults %+v", cfg)
	}
	if cfg.zipf != 0 || cfg.seed != 1 || cfg.limit != 0 || cfg.window != 1 {
		t.Errorf("defaults: zipf %g seed %d limit %d window %d, want keys in turn and no limit check", cfg.zipf, cfg.seed, cfg.limit, cfg.window)
	}
	cfg, err = parseBenchFlags([]string{"-n", "10"}, io.Discard)
	if err != nil || cfg.duration != 0 || cfg.count != 10 {
		t.Errorf("-n alone: duration %v count %d err %v, want no time bound", cfg.duration, cfg.count, err)
	}
}

func TestFlagLists(t *testing.T) {
	cfg, err := parseBenchFlags([]string{"-addr", " 127.0.0.1:1, 127.0.0.1:2,", "-pids", "10,20", "-d", "2s", "-hits", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.addrs, []string{"127.0.0.1:1", "127.0.0.1:2"}) || !slices.Equal(cfg.pids, []int{10, 20}) {
		t.Errorf("addrs %q pids %v", cfg.addrs, cfg.pids)
	}
	if cfg.duration != 2*time.Second || cfg.hits != 0 {
		t.Errorf("duration %v hits %d", cfg.duration, cfg.hits)
	}
}

func TestFlagKeysAndLimit(t *testing.T) {
	cfg, err := parseBenchFlags([]string{"-zipf", "1.1", "-seed", "9", "-limit", "100", "-per", "minute"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.zipf != 1.1 || cfg.seed != 9 || cfg.limit != 100 || cfg.window != 60 {
		t.Errorf("zipf %g seed %d limit %d window %d, want 1.1, 9, 100, 60", cfg.zipf, cfg.seed, cfg.limit, cfg.window)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"-addr", ","}, "no address"},
		{[]string{"-c", "0"}, "-c must be at least 1"},
		{[]string{"-keys", "0"}, "-keys must be at least 1"},
		{[]string{"-conns", "0"}, "-conns must be at least 1"},
		{[]string{"-domain", ""}, "-domain must not be empty"},
		{[]string{"-n", "-1"}, "-n must not be negative"},
		{[]string{"-rate", "-5"}, "-rate must be"},
		{[]string{"-timeout", "0s"}, "-timeout must be positive"},
		{[]string{"-descriptor", "api_key"}, `entry "api_key" is not key=value`},
		{[]string{"-descriptor", "a=1;=2"}, "is not key=value"},
		{[]string{"-pids", "12,x"}, `"x" is not a process id`},
		{[]string{"-hits", "4294967296"}, "exceeds"},
		{[]string{"-zipf", "1"}, "-zipf must be 0 or a finite number > 1"},
		{[]string{"-zipf", "0.5"}, "-zipf must be"},
		{[]string{"-zipf", "-2"}, "-zipf must be"},
		{[]string{"-zipf", "NaN"}, "-zipf must be"},
		{[]string{"-per", "hour"}, `-per must be second or minute, got "hour"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		_, err := parseBenchFlags(tt.give, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tt.give, err, tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseBenchFlags([]string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "serve-noop") || !strings.Contains(out.String(), "-descriptor") {
		t.Errorf("err %v, usage:\n%s", err, out.String())
	}
}
