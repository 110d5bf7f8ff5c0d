//go:build !unix

package main

// fileLimit is unknown where there is no RLIMIT_NOFILE.
func fileLimit() uint64 { return 0 }
