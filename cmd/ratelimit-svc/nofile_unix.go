//go:build unix

package main

import "syscall"

// fileLimit is the soft RLIMIT_NOFILE (which the Go runtime raises to the
// hard limit at start); 0 when it cannot be read.
func fileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}
