// Command server is an HTTP server over RDMA: net/http's unchanged http.Server takes its
// connections from rdmanet.Listen instead of net.Listen, and that is the whole
// difference.
//
//	go run ./examples/http/server -addr 127.0.0.2:8080
//	go run ./examples/http/client -addr 127.0.0.2:8080 -local 127.0.0.3 -size 67108864
//
// It serves two paths: / answers a greeting, and /data?size=N sends N bytes of a
// deterministic pattern with their SHA-256 in the X-Content-SHA256 header, for the
// client to check. It serves until interrupted, then shuts down gracefully.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/rdmanet"
)

// maxSize bounds /data's size: a request must not make the server allocate at will.
const maxSize = 1 << 30

func main() {
	addr := flag.String("addr", "127.0.0.2:8080", "host:port to listen on; host is the RDMA device's address, port 0 picks one")
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

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over RDMA, %s\n", r.RemoteAddr)
	})
	mux.HandleFunc("GET /data", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("size"))
		if err != nil || n < 0 || n > maxSize {
			http.Error(w, fmt.Sprintf("size must be 0..%d", maxSize), http.StatusBadRequest)
			return
		}
		body := pattern(n)
		sum := sha256.Sum256(body)
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Header().Set("X-Content-SHA256", hex.EncodeToString(sum[:]))
		w.Write(body)
		log.Printf("sent %d bytes to %s", n, r.RemoteAddr)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx) // closes the listener too
	}()
	if err := srv.Serve(l); err != http.ErrServerClosed {
		log.Fatal(err)
	}
	log.Print("stopped")
}

// pattern is n bytes that are not all alike, so that a misplaced or repeated chunk
// changes the checksum.
func pattern(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}
