// Package testnet picks loopback addresses for tests that start servers.
// It has no state; its functions are safe for concurrent use.
package testnet

import (
	"net"
	"testing"
)

// FreeAddrs picks n distinct free loopback addresses. Every listener is
// held until all are picked, so the kernel cannot hand out one port
// twice; another process may still take one before the caller binds it.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}
