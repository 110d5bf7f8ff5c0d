package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimit is --memory-limit: auto, off, or Bytes. The zero value is
// auto: GOMEMLIMIT when it is set, else memoryLimitShare of the
// container's cgroup memory limit, else none.
type memoryLimit struct {
	Off   bool
	Bytes int64 // > 0: this limit
}

// memoryLimitShare is the part of the container's memory the runtime
// aims to stay under: the rest is for what the Go heap does not count
// (stacks, buffers outside it, the kernel's page cache charged to the
// cgroup).
const memoryLimitShare = 0.9

// v1Unlimited: cgroup v1 writes "no limit" as the largest page-aligned
// int64; anything from here up is no limit.
const v1Unlimited = 1 << 62

// parseMemoryLimit reads auto, off, or a size in bytes with an optional
// unit: B, KiB, MiB, GiB or TiB (as GOMEMLIMIT takes them).
func parseMemoryLimit(s string) (memoryLimit, error) {
	switch s {
	case "auto":
		return memoryLimit{}, nil
	case "off":
		return memoryLimit{Off: true}, nil
	}
	num, mul := s, int64(1)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mul = strings.TrimSuffix(s, u.suffix), u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mul {
		return memoryLimit{}, fmt.Errorf("%q: want auto, off, or a positive size such as 512MiB (units B, KiB, MiB, GiB, TiB)", s)
	}
	return memoryLimit{Bytes: n * mul}, nil
}

// applyMemoryLimit sets the runtime's soft memory limit as m says, reading
// the container's limit below root ("/" in production) for auto, and logs
// what it chose. from names the flag or variable that set m. It returns a
// function that puts the previous limit back.
func applyMemoryLimit(m memoryLimit, from string, getenv func(string) string, root string, log *slog.Logger) (restore func()) {
	prev := debug.SetMemoryLimit(-1)
	restore = func() { debug.SetMemoryLimit(prev) }
	switch {
	case m.Off:
		debug.SetMemoryLimit(math.MaxInt64)
		log.Info("memory limit: none", "from", from)
	case m.Bytes > 0:
		debug.SetMemoryLimit(m.Bytes)
		log.Info("memory limit", "bytes", m.Bytes, "from", from)
	case getenv("GOMEMLIMIT") != "":
		log.Info("memory limit", "bytes", prev, "from", "GOMEMLIMIT")
	default:
		limit, file, err := cgroupMemoryLimit(root)
		if err != nil {
			log.Warn("memory limit: none: the container's limit could not be read", "err", err)
			return restore
		}
		if limit == 0 {
			log.Info("memory limit: none: no container limit found")
			return restore
		}
		soft := int64(float64(limit) * memoryLimitShare)
		debug.SetMemoryLimit(soft)
		log.Info("memory limit", "bytes", soft, "from", file, "container_bytes", limit, "share", memoryLimitShare)
	}
	return restore
}

// cgroupMemoryLimit reads the memory limit of this process's cgroup below
// root: cgroup v2's memory.max or v1's memory.limit_in_bytes, in its
// cgroup's directory and every parent up to the mount (a container's
// mount shows its own cgroup as the root), the smallest found. 0 with a
// nil error: no limit.
func cgroupMemoryLimit(root string) (limit int64, file string, err error) {
	v2, v1, err := selfCgroups(root)
	if err != nil {
		return 0, "", err
	}
	base := filepath.Join(root, "sys", "fs", "cgroup")
	var candidates []string
	for dir := range parents(v2) {
		candidates = append(candidates, filepath.Join(base, dir, "memory.max"))
	}
	for dir := range parents(v1) {
		candidates = append(candidates, filepath.Join(base, "memory", dir, "memory.limit_in_bytes"))
	}
	for _, f := range candidates {
		n, err := readLimit(f)
		if err != nil {
			return 0, "", err
		}
		if n > 0 && (limit == 0 || n < limit) {
			limit, file = n, f
			if rel, err := filepath.Rel(root, f); err == nil {
				file = "/" + filepath.ToSlash(rel)
			}
		}
	}
	return limit, file, nil
}

// selfCgroups reads root/proc/self/cgroup: the v2 path ("0::/path") and
// the v1 memory controller's path ("N:memory:/path"), "/" when absent.
func selfCgroups(root string) (v2, v1 string, err error) {
	v2, v1 = "/", "/"
	b, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup"))
	if errors.Is(err, fs.ErrNotExist) {
		return v2, v1, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading this process's cgroups: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasController(parts[1], "memory"):
			v1 = parts[2]
		}
	}
	return path.Clean("/" + v2), path.Clean("/" + v1), nil
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// parents yields p (clean and absolute) and each of its parents, "/" last.
func parents(p string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for {
			if !yield(p) || p == "/" {
				return
			}
			p = path.Dir(p)
		}
	}
}

// readLimit reads a cgroup limit file: a number of bytes, or "max" (v2)
// or a huge number (v1) for none; a missing file is no limit, 0.
func readLimit(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", file, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a number of bytes", file, s)
	}
	if n >= v1Unlimited {
		return 0, nil
	}
	return n, nil
}
