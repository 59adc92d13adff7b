// Command nettest is the baseline for goverbs' benchmark comparison: the Go standard
// library's sockets used the way a Go programmer would use them, between two processes.
// It imports nothing from goverbs, so a cost in goverbs' own I/O shows up as a gap
// between goverbs and these figures instead of hiding in both.
//
//	nettest udp_lat  [-s SIZE] [-n ITERS] [--busy-poll [--rc-wire]] --bind ADDR [SERVER]
//	nettest udp_rate [-s SIZE] [-D SECONDS] --bind ADDR [SERVER]
//	nettest tcp_bw   [-s SIZE] [-D SECONDS] --bind ADDR [SERVER]
//	nettest tcp_lat  [-s SIZE] [-n ITERS] [--busy-poll] --bind ADDR [SERVER]
//	nettest unix_lat [-s SIZE] [-n ITERS] --bind ADDR [SERVER]
//	nettest shm_lat  [-s SIZE] [-n ITERS] --bind ADDR [SERVER]
//	nettest udp_gso_bw [-s SIZE] [-D SECONDS] [--zerocopy] --bind ADDR [SERVER]
//
// Without SERVER the process serves on --bind (udp_lat echoes until it is killed, the
// others serve one client and exit); with it, it is the client and prints one JSON row
// in the shape of goverbs' perftest tools' --json rows, so bench/report can put the two
// side by side. Latency is one-way: half of each round trip, as perftest reports it.
//
// What each test is, and why it is the fair baseline:
//   - udp_lat: 8-byte ping-pong on a net.UDPConn. The client is a connected socket
//     (net.DialUDP, then Write and Read); the echo reads with ReadFromUDPAddrPort and
//     answers with WriteToUDPAddrPort. Both block in Go's netpoller, as goverbs' default
//     mode (a CQ waited on) does.
//   - udp_lat --busy-poll: the same sockets, but both sides spin on non-blocking
//     read(2)/write(2) on the socket's descriptor (taken with SyscallConn().Control; Go
//     already made it non-blocking) until a datagram is there: the plainest busy poll a
//     Go programmer can write, and the one ../shared/baseline measures with -spin. The
//     echo takes its first datagram through the netpoller and then connects to the
//     sender, so every turn is one read and one write.
//   - udp_lat --busy-poll --rc-wire: not what a Go programmer would write, but what the
//     kernel costs for the datagrams an RC ping-pong over RoCEv2 sends: an unconnected
//     socket with DF set (an ICRC covers the IPv4 Identification, which only such a
//     socket leaves at 0), and each message followed, in the same sendmmsg, by a
//     20-byte datagram the size of an RC ACK, which the reader skips. The floor under
//     goverbs' busy-poll latency on this kernel, with no RDMA work in user space; a
//     baseline-only row in bench/compare.sh. Linux only.
//   - udp_rate: the message-rate baseline. A plain loop of conn.Write on a connected
//     socket, one datagram per write(2); the receiver counts with a plain Read loop. It
//     reports the datagrams that arrived (loss on UDP is the baseline's problem, not
//     hidden), per second of sending.
//   - tcp_bw: one net.TCPConn stream, SIZE-byte writes (64 KiB for the comparison), the
//     receiver reading into a 64 KiB buffer. The time runs until the receiver has read
//     everything and closed, so bytes still in socket buffers are not counted as moved.
//   - tcp_lat: SIZE-byte request/response on one TCP connection (Go sets TCP_NODELAY),
//     netpoller or, with --busy-poll, spinning like udp_lat's.
//   - unix_lat: SIZE-byte request/response on one unix stream socket in $TMPDIR (named
//     after --bind and the port), netpoller on both sides: bench/samehost.sh's baseline
//     for two processes of one host.
//   - shm_lat: not a transport a program would use but the machine's floor under every
//     shared-memory one: SIZE bytes handed to the other process and back through a file
//     both map, each side spinning on a sequence word (shm_unix.go). bench/samehost.sh's
//     yardstick for goverbs' same-host rings, whose latency is this floor plus an RDMA
//     engine's work; the floor differs several times between machines (160 ns a round
//     trip where the same-host issue was written, 600 ns on another 2-core VM).
//   - udp_gso_bw: not a baseline in bench/compare.sh but the socket layer's ceiling for
//     datagrams the size of RoCEv2 packets (SIZE, default 4112: a 4096-byte payload with
//     its BTH and ICRC): runs of up to 64 KiB sent with UDP GSO (a UDP_SEGMENT control
//     message on WriteMsgUDP) and read with UDP GRO. With --zerocopy the sends ask for
//     MSG_ZEROCOPY and the row says how many the kernel copied anyway. Linux only.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sort"
	"time"
)

// defaultPort is the server's UDP and TCP port; clients take one the kernel picks.
const defaultPort = 18600

// options are one run's command line.
type options struct {
	size   int
	iters  int
	dur    time.Duration
	busy   bool
	rcWire bool
	// zerocopy: udp_gso_bw sends with MSG_ZEROCOPY.
	zerocopy bool
	bind     netip.Addr
	port     int
	server   netip.Addr // invalid on the serving side
}

func (o options) serving() bool { return !o.server.IsValid() }

// serverAddr is the server's address on either side: its --bind, or the client's
// SERVER. Tests that meet by a path rather than a socket name it after this (unix_lat,
// shm_lat).
func (o options) serverAddr() netip.Addr {
	if o.serving() {
		return o.bind
	}
	return o.server
}

// local is the address the process binds: the server's well-known port, or any port for
// a client.
func (o options) local() netip.AddrPort {
	if o.serving() {
		return netip.AddrPortFrom(o.bind, uint16(o.port))
	}
	return netip.AddrPortFrom(o.bind, 0)
}

func (o options) remote() netip.AddrPort { return netip.AddrPortFrom(o.server, uint16(o.port)) }

var tests = map[string]func(options) error{
	"udp_lat":  udpLat,
	"udp_rate": udpRate,
	"tcp_bw":   tcpBW,
	"tcp_lat":  tcpLat,
	"unix_lat": unixLat,
	"shm_lat":  shmLat,
	// The socket layer's ceiling, not a baseline of compare.sh's.
	"udp_gso_bw": udpGSOBW,
}

func main() {
	if len(os.Args) < 2 || tests[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: nettest udp_lat|udp_rate|tcp_bw|tcp_lat|unix_lat|shm_lat|udp_gso_bw [flags] [server]")
		os.Exit(2)
	}
	o, err := parse(os.Args[1], os.Args[2:])
	if err == nil {
		err = tests[os.Args[1]](o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nettest %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func parse(name string, args []string) (options, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	size := fs.Int("s", 0, "message size in bytes (0: 8 for udp_*, 64 for tcp_lat, 65536 for tcp_bw)")
	iters := fs.Int("n", 10000, "round trips (udp_lat, tcp_lat, unix_lat, shm_lat)")
	dur := fs.Float64("D", 3, "seconds to send (udp_rate, tcp_bw, udp_gso_bw)")
	busy := fs.Bool("busy-poll", false, "spin on non-blocking reads instead of sleeping in the netpoller (udp_lat, tcp_lat)")
	rcWire := fs.Bool("rc-wire", false, "udp_lat --busy-poll: send as an RC ping-pong does (unconnected, DF, an ACK-sized datagram behind each message)")
	zerocopy := fs.Bool("zerocopy", false, "udp_gso_bw: send with MSG_ZEROCOPY")
	bind := fs.String("bind", "127.0.0.1", "local IP address")
	port := fs.Int("p", defaultPort, "the server's UDP/TCP port")
	fs.Parse(args)
	o := options{size: *size, iters: *iters, dur: time.Duration(*dur * float64(time.Second)), busy: *busy, rcWire: *rcWire, zerocopy: *zerocopy, port: *port}
	if o.size == 0 {
		o.size = map[string]int{"udp_lat": 8, "udp_rate": 8, "tcp_bw": 65536, "tcp_lat": 64, "unix_lat": 8, "shm_lat": 8, "udp_gso_bw": 4112}[name]
	}
	var err error
	if o.bind, err = netip.ParseAddr(*bind); err != nil {
		return o, fmt.Errorf("--bind %q: not an IP address", *bind)
	}
	switch fs.NArg() {
	case 0:
	case 1:
		if o.server, err = netip.ParseAddr(fs.Arg(0)); err != nil {
			return o, fmt.Errorf("server %q: not an IP address", fs.Arg(0))
		}
	default:
		return o, errors.New("expected at most one server address")
	}
	switch {
	case o.size < 1 || o.size > 1<<30:
		return o, fmt.Errorf("-s %d: want 1 to 1 GiB", o.size)
	case (name == "udp_lat" || name == "udp_rate" || name == "udp_gso_bw") && o.size > 65507:
		return o, fmt.Errorf("-s %d: larger than a UDP datagram can carry", o.size)
	case o.iters < 1:
		return o, fmt.Errorf("-n %d: want at least 1", o.iters)
	case o.dur <= 0:
		return o, fmt.Errorf("-D %v: want a positive duration", *dur)
	case o.port < 1 || o.port > 65535:
		return o, fmt.Errorf("-p %d: not a port", o.port)
	case o.busy && name != "udp_lat" && name != "tcp_lat":
		return o, fmt.Errorf("--busy-poll applies to udp_lat and tcp_lat only")
	case o.zerocopy && name != "udp_gso_bw":
		return o, fmt.Errorf("--zerocopy applies to udp_gso_bw only")
	case o.rcWire && (name != "udp_lat" || !o.busy):
		return o, fmt.Errorf("--rc-wire applies to udp_lat --busy-poll only")
	case o.rcWire && o.size == rcAckLen:
		return o, fmt.Errorf("-s %d: with --rc-wire the message must differ in size from the %d-byte ACK", o.size, rcAckLen)
	}
	return o, nil
}

// emit prints one result row as JSON on stdout.
func emit(row map[string]float64) {
	b, err := json.Marshal(row)
	if err != nil { // a NaN or infinity: a broken measurement, not a row
		fmt.Fprintln(os.Stderr, "nettest:", err)
		os.Exit(1)
	}
	fmt.Println(string(b))
}

// latencyRow summarises round-trip samples as perftest does: one-way times (half of
// each round trip) in microseconds, t_typical the median.
func latencyRow(size int, rtts []time.Duration) map[string]float64 {
	us := make([]float64, len(rtts))
	var sum float64
	for i, d := range rtts {
		us[i] = float64(d.Nanoseconds()) / 2 / 1000
		sum += us[i]
	}
	sort.Float64s(us)
	mean := sum / float64(len(us))
	var sq float64
	for _, v := range us {
		sq += (v - mean) * (v - mean)
	}
	pct := func(q float64) float64 { return us[int(q*float64(len(us)-1))] }
	return map[string]float64{"bytes": float64(size), "iterations": float64(len(us)),
		"t_min_us": us[0], "t_max_us": us[len(us)-1], "t_typical_us": pct(0.5), "t_avg_us": mean,
		"t_stdev_us": math.Sqrt(sq / float64(len(us))), "p99_us": pct(0.99), "p999_us": pct(0.999)}
}

// pingPong times iters calls of turn, one clock read per turn as goverbs' latency tools
// take it (the read ends one sample and starts the next).
func pingPong(iters int, turn func(i int) error) ([]time.Duration, error) {
	rtts := make([]time.Duration, iters)
	t0 := time.Now()
	for i := range rtts {
		if err := turn(i); err != nil {
			return nil, err
		}
		now := time.Now()
		rtts[i] = now.Sub(t0)
		t0 = now
	}
	return rtts, nil
}

// dialTCP connects to the server, retrying for a few seconds while it starts.
func dialTCP(o options) (*net.TCPConn, error) {
	var err error
	for range 50 {
		var c *net.TCPConn
		if c, err = net.DialTCP("tcp", net.TCPAddrFromAddrPort(o.local()), net.TCPAddrFromAddrPort(o.remote())); err == nil {
			return c, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// runDeadline bounds a measurement so that a lost datagram ends it with an error
// instead of a hang: generous, never reached on a healthy run.
func runDeadline(o options) time.Time {
	return time.Now().Add(30*time.Second + time.Duration(o.iters)*time.Millisecond + o.dur)
}
