// Command nettest is the baseline for goverbs' benchmark comparison: Go TCP stream
// bandwidth and UDP ping-pong latency between two processes, reporting JSON rows in the
// same shape as goverbs' perftest tools (--json), so bench/report can put them side by
// side.
//
//	nettest tcp_bw  [-s SIZE] [-D SECONDS] --bind ADDR [SERVER]
//	nettest udp_lat [-s SIZE] [-n ITERS] [--busy-poll] --bind ADDR [SERVER]
//
// No SERVER address: the process serves on --bind (udp_lat until it is killed); with one:
// it is the client.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"time"

	"github.com/goverbs/goverbs/netio"
)

const port = 18600

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nettest tcp_bw|udp_lat [flags] [server]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	size := fs.Int("s", 65536, "message size in bytes")
	dur := fs.Float64("D", 3, "seconds to run (tcp_bw)")
	iters := fs.Int("n", 10000, "round trips (udp_lat)")
	busy := fs.Bool("busy-poll", false, "spin on a non-blocking receive instead of sleeping (udp_lat)")
	bind := fs.String("bind", "127.0.0.1", "local address")
	fs.Parse(os.Args[2:])
	server := fs.Arg(0)
	var err error
	switch os.Args[1] {
	case "tcp_bw":
		err = tcpBW(*bind, server, *size, time.Duration(*dur*float64(time.Second)))
	case "udp_lat":
		err = udpLat(*bind, server, *size, *iters, *busy)
	default:
		err = fmt.Errorf("unknown test %q", os.Args[1])
	}
	netio.TraceReport(os.Stderr) // a goverbs_trace build only
	if err != nil {
		fmt.Fprintln(os.Stderr, "nettest:", err)
		os.Exit(1)
	}
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func tcpBW(bind, server string, size int, d time.Duration) error {
	if server == "" {
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, fmt.Sprint(port)))
		if err != nil {
			return err
		}
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, c)
		return err
	}
	var c net.Conn
	var err error
	for i := 0; i < 50; i++ { // the server may still be starting
		if c, err = net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP(bind)}, net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(server), port))); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	buf := make([]byte, size)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		n++
	}
	el := time.Since(start)
	c.Close()
	mib := float64(n) * float64(size) / el.Seconds() / (1 << 20)
	emit(map[string]any{"bytes": size, "iterations": n, "bw_peak_mib_s": 0, "bw_avg_mib_s": mib,
		"msg_rate_mpps": float64(n) / el.Seconds() / 1e6})
	return nil
}

func udpLat(bind, server string, size, iters int, busy bool) error {
	lport := uint16(port)
	if server != "" {
		lport++
	}
	c, err := netio.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr(bind), lport), netio.UDPOptions{BusyPoll: busy})
	if err != nil {
		return err
	}
	defer c.Close()
	p, _ := netio.AsPoller(c)
	in := []netio.Message{{Buf: make([]byte, 65536)}}
	recv := func() (int, error) {
		if !busy {
			return c.ReadBatch(in)
		}
		for {
			n, err := p.PollBatch(in)
			if n > 0 || err != nil {
				return n, err
			}
		}
	}
	out := []netio.Message{{Buf: make([]byte, size), N: size}}
	if server == "" { // echo until killed
		for {
			if _, err := recv(); err != nil {
				return err
			}
			// The client listens on port+1; its datagrams come from its send socket.
			out[0].Addr = netip.AddrPortFrom(in[0].Addr.Addr(), port+1)
			if _, err := c.WriteBatch(out); err != nil {
				return err
			}
		}
	}
	out[0].Addr = netip.AddrPortFrom(netip.MustParseAddr(server), port)
	// Wait for the server: ping until it answers (polling, so nothing is left blocked).
	for answered := false; !answered; {
		if _, err := c.WriteBatch(out); err != nil {
			return err
		}
		for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
			if n, err := p.PollBatch(in); err != nil {
				return err
			} else if n > 0 {
				answered = true
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	lat := make([]float64, iters)
	t0 := time.Now() // one clock read per iteration, as goverbs' latency tests take
	for i := range lat {
		if _, err := c.WriteBatch(out); err != nil {
			return err
		}
		if _, err := recv(); err != nil {
			return err
		}
		now := time.Now()
		lat[i] = float64(now.Sub(t0).Nanoseconds()) / 2 / 1000
		t0 = now
	}
	if len(lat) == 0 {
		return errors.New("no iterations")
	}
	sort.Float64s(lat)
	var sum float64
	for _, v := range lat {
		sum += v
	}
	pct := func(q float64) float64 { return lat[int(q*float64(len(lat)-1))] }
	emit(map[string]any{"bytes": size, "iterations": iters, "t_min_us": lat[0], "t_max_us": lat[len(lat)-1],
		"t_typical_us": pct(0.5), "t_avg_us": sum / float64(len(lat)), "p99_us": pct(0.99), "p999_us": pct(0.999)})
	return nil
}
