package envoytest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Loopback serves what register puts on a gRPC server over a real
// 127.0.0.1 connection and returns a client connection to it. Both stop
// when the test ends.
func Loopback(tb testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}
