// Command client calls the Greeter of ../server over RDMA: the unchanged gRPC client
// dials through rdmanet, given as its context dialer.
//
//	go run ./client -addr 127.0.0.2:50051 -local 127.0.0.3 -name you
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goverbs/goverbs/examples/grpc/helloworld"
	"github.com/goverbs/goverbs/rdmanet"
)

func main() {
	addr := flag.String("addr", "127.0.0.2:50051", "the server's host:port")
	local := flag.String("local", "", "address of the RDMA device to dial from (default: the one the route to the server leaves from)")
	name := flag.String("name", "world", "name to greet")
	count := flag.Int("n", 1, "how many calls to make, over the one connection")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("client: ")

	d := &rdmanet.Dialer{Timeout: 10 * time.Second}
	if *local != "" {
		var err error
		if d.LocalAddr, err = netip.ParseAddr(*local); err != nil {
			log.Fatalf("-local: %v", err)
		}
	}
	// passthrough: hands the address to the dialer as it is, without gRPC's DNS
	// resolver; the dialer names network "rdma", as gRPC's own would name "tcp".
	conn, err := grpc.NewClient("passthrough:///"+*addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	greeter := helloworld.NewGreeterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range *count {
		reply, err := greeter.SayHello(ctx, &helloworld.HelloRequest{Name: *name})
		if err != nil {
			log.Fatalf("call %d: %v", i+1, err)
		}
		fmt.Printf("greeting: %s\n", reply.GetMessage())
	}
}
