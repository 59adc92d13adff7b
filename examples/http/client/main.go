// Command client fetches from ../server over RDMA: net/http's unchanged client, whose
// Transport dials through rdmanet instead of TCP.
//
//	go run ./examples/http/client -addr 127.0.0.2:8080 -local 127.0.0.3 -size 67108864
//
// It prints the greeting, then fetches -size bytes from /data, checks them against the
// server's SHA-256, and prints how many came and how fast.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/rdmanet"
)

func main() {
	addr := flag.String("addr", "127.0.0.2:8080", "the server's host:port")
	local := flag.String("local", "", "address of the RDMA device to dial from (default: the one the route to the server leaves from)")
	size := flag.Int("size", 64<<20, "bytes to fetch from /data")
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
	// The Transport asks for "tcp"; the dialer is told "rdma".
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "rdma", addr)
		},
	}}
	defer client.CloseIdleConnections()
	base := "http://" + *addr

	resp, err := client.Get(base + "/")
	if err != nil {
		log.Fatal(err)
	}
	greeting, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(greeting))

	start := time.Now()
	resp, err = client.Get(fmt.Sprintf("%s/data?size=%d", base, *size))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		log.Fatalf("/data: %s", resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		log.Fatalf("/data: after %d bytes: %v", n, err)
	}
	took := time.Since(start)
	got, want := hex.EncodeToString(h.Sum(nil)), resp.Header.Get("X-Content-SHA256")
	if n != int64(*size) || got != want {
		log.Fatalf("/data: %d bytes with SHA-256 %s; want %d bytes with %s", n, got, *size, want)
	}
	fmt.Printf("%d bytes, SHA-256 matches, %.0f MB/s\n", n, float64(n)/took.Seconds()/1e6)
}
