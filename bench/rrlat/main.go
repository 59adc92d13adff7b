// Command rrlat is rdmanet's request/response as percentiles of one-way time, where
// `goverbs rstream -S 64 -C 1` reports a mean: the two processes' threads share one
// core at times and not at others, and the mean hides which (docs/DESIGN.md, "What a
// spin must not do": 2.6-3.1 us one-way apart, 5.3-6.3 together, on 2 cores).
//
//	rrlat -b ADDR [-p PORT]                         # server: echoes until the client closes
//	rrlat -b ADDR -s SERVER [-p PORT] [-n N] [-S SIZE]  # client: one line of percentiles
//
// The client sends SIZE bytes and reads them back N times, after 1000 untimed turns,
// and prints the mean and the 10th to 99th percentiles of half of each round trip.
// Build it at each revision to compare, and interleave the runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/goverbs/goverbs/rdmanet"
)

func main() {
	bind := flag.String("b", "", "`ADDR` of the device to listen on or dial from")
	server := flag.String("s", "", "the server's `ADDR` (without it, be the server)")
	port := flag.String("p", "7471", "`PORT`")
	iters := flag.Int("n", 20000, "timed round trips")
	size := flag.Int("S", 64, "message `SIZE` in bytes")
	flag.Parse()
	if *bind == "" || *size <= 0 || *iters <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	buf := make([]byte, *size)
	if *server == "" {
		check(serve(net.JoinHostPort(*bind, *port), buf))
		return
	}
	local, err := netip.ParseAddr(*bind)
	check(err)
	d := rdmanet.Dialer{LocalAddr: local}
	c, err := d.DialContext(context.Background(), rdmanet.Network, net.JoinHostPort(*server, *port))
	check(err)
	defer c.Close()
	turn := func() {
		_, err := c.Write(buf)
		check(err)
		_, err = io.ReadFull(c, buf)
		check(err)
	}
	for range 1000 {
		turn()
	}
	rtt := make([]time.Duration, *iters)
	start := time.Now()
	for i := range rtt {
		t := time.Now()
		turn()
		rtt[i] = time.Since(t)
	}
	total := time.Since(start)
	slices.Sort(rtt)
	n := len(rtt)
	oneway := func(d time.Duration) float64 { return float64(d) / 2e3 }
	fmt.Printf("oneway_us mean %.2f p10 %.2f p25 %.2f p50 %.2f p75 %.2f p90 %.2f p99 %.2f\n",
		float64(total)/float64(n)/2e3, oneway(rtt[n/10]), oneway(rtt[n/4]), oneway(rtt[n/2]),
		oneway(rtt[n*3/4]), oneway(rtt[n*9/10]), oneway(rtt[n*99/100]))
}

// serve accepts one connection and echoes what it reads in len(buf) messages until
// the client closes.
func serve(addr string, buf []byte) error {
	l, err := rdmanet.Listen(rdmanet.Network, addr)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("listening")
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil
		}
		if _, err := c.Write(buf); err != nil {
			return nil
		}
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "rrlat:", err)
		os.Exit(1)
	}
}
