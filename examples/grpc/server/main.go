// Command server is gRPC's hello-world Greeter served over RDMA: the unchanged
// grpc.Server takes its connections from rdmanet.Listen instead of net.Listen, and
// that is the whole difference.
//
//	go run ./server -addr 127.0.0.2:50051
//	go run ./client -addr 127.0.0.2:50051 -local 127.0.0.3 -name you
//
// (in examples/grpc, a module of its own so that the goverbs module does not depend
// on gRPC). It serves until interrupted, then stops gracefully.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	"github.com/goverbs/goverbs/examples/grpc/helloworld"
	"github.com/goverbs/goverbs/rdmanet"
)

// greeter implements the Greeter service.
type greeter struct {
	helloworld.UnimplementedGreeterServer
}

func (greeter) SayHello(_ context.Context, req *helloworld.HelloRequest) (*helloworld.HelloReply, error) {
	log.Printf("greeting %q", req.GetName())
	return &helloworld.HelloReply{Message: "Hello, " + req.GetName()}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.2:50051", "host:port to listen on; host is the RDMA device's address, port 0 picks one")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("server: ")

	l, err := rdmanet.Listen("rdma", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The address on stdout, with the port chosen when -addr said 0, for whoever
	// started the server (the example's test) to dial.
	fmt.Printf("listening on rdma %v\n", l.Addr())

	srv := grpc.NewServer()
	helloworld.RegisterGreeterServer(srv, greeter{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop() // closes the listener too
	}()
	if err := srv.Serve(l); err != nil {
		log.Fatal(err)
	}
	log.Print("stopped")
}
