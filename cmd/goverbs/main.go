// Command goverbs is the toolbox of the goverbs software RDMA device: the device
// listings of ibv_devices and ibv_devinfo, the four rdma-core ping-pongs and
// perftest-style bandwidth and latency benchmarks, all over the software RoCEv2
// device (UDP port 4791), so that they talk to Linux Soft-RoCE and to each other.
//
//	goverbs devices
//	goverbs devinfo [-d DEV | --bind ADDR] [-v]
//	goverbs rc_pingpong --bind 127.0.0.2 -g 0            # server
//	goverbs rc_pingpong --bind 127.0.0.3 -g 0 127.0.0.2  # client
//	goverbs write_bw --loopback
//	goverbs write_bw --bind 10.0.0.1 -n 1000             # server for ib_write_bw (perftest)
//	goverbs stat                                         # counters of the tools running now
//	goverbs serve sw0=127.0.0.2                          # a shared device; GOVERBS_ATTACH=1 tools attach
//	goverbs asyncwatch --bind 127.0.0.2                  # that tool's async events
//	goverbs rstream -b 127.0.0.2                         # stream server (rdmanet)
//	goverbs rstream -b 127.0.0.3 -s 127.0.0.2            # client; --tcp: the same over Go TCP
//	goverbs udpong -b 127.0.0.2                          # datagram server (rdmanet.PacketConn)
//	goverbs udpong -b 127.0.0.3 -s 127.0.0.2 -C 100      # client; -T s: the same over Go UDP
//	goverbs ibstat                                       # infiniband-diags' port views
//	goverbs ibping -S --bind 127.0.0.2                   # answer pings on QP1
//	goverbs ibping --bind 127.0.0.3 -c 3 127.0.0.2       # ping it
//	goverbs help write_bw                                # a command's flags
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/cmtools"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/ibping"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/inspect"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/perftest"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/pingpong"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/rstream"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/serve"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/soak"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/netio"
	_ "github.com/goverbs/goverbs/verbs/soft/xdp" // GOVERBS_DEVICES entries "NAME=ADDR@xdp:IFACE/Q"
)

// commands is the command table: each command's name, its one-line summary (the
// help pages show it) and the function that parses its flags and runs it.
var commands = []*tool.Command{
	{Name: "devices", Summary: "list software RDMA devices (ibv_devices)", Run: inspect.RunDevices},
	{Name: "devinfo", Summary: "show device and port attributes (ibv_devinfo)", Run: inspect.RunDevinfo},
	{Name: "rc_pingpong", Summary: "RC send/receive ping-pong (ibv_rc_pingpong)", Run: pingpong.Runner(pingpong.RC)},
	{Name: "uc_pingpong", Summary: "UC send/receive ping-pong (ibv_uc_pingpong)", Run: pingpong.Runner(pingpong.UC)},
	{Name: "ud_pingpong", Summary: "UD send/receive ping-pong (ibv_ud_pingpong)", Run: pingpong.Runner(pingpong.UD)},
	{Name: "srq_pingpong", Summary: "RC ping-pong over a shared receive queue (ibv_srq_pingpong)", Run: pingpong.Runner(pingpong.SRQ)},
	{Name: "xsrq_pingpong", Summary: "XRC ping-pong: senders into one XRC SRQ (ibv_xsrq_pingpong)", Run: pingpong.RunXSRQ},
	{Name: "send_bw", Summary: "SEND bandwidth (ib_send_bw)", Run: perftest.Runner(perftest.SendBW)},
	{Name: "write_bw", Summary: "RDMA WRITE bandwidth (ib_write_bw)", Run: perftest.Runner(perftest.WriteBW)},
	{Name: "read_bw", Summary: "RDMA READ bandwidth (ib_read_bw)", Run: perftest.Runner(perftest.ReadBW)},
	{Name: "atomic_bw", Summary: "atomic FETCH_AND_ADD or CMP_AND_SWAP bandwidth (ib_atomic_bw)", Run: perftest.Runner(perftest.AtomicBW)},
	{Name: "send_lat", Summary: "SEND latency (ib_send_lat)", Run: perftest.Runner(perftest.SendLat)},
	{Name: "write_lat", Summary: "RDMA WRITE latency (ib_write_lat)", Run: perftest.Runner(perftest.WriteLat)},
	{Name: "read_lat", Summary: "RDMA READ latency (ib_read_lat)", Run: perftest.Runner(perftest.ReadLat)},
	{Name: "atomic_lat", Summary: "atomic FETCH_AND_ADD or CMP_AND_SWAP latency (ib_atomic_lat)", Run: perftest.Runner(perftest.AtomicLat)},
	{Name: "soak", Summary: "long verified RC stream over a simulated faulty network", Run: soak.RunCommand},
	{Name: "version", Summary: "print the goverbs module version and the Go version", Run: runVersion},
	{Name: "stat", Summary: "counters of running tools' devices and QPs (rdma statistic)", Run: inspect.RunStat},
	{Name: "serve", Summary: "run shared software devices that many processes attach to (GOVERBS_ATTACH=1)", Run: serve.Run},
	{Name: "asyncwatch", Summary: "a running tool's device's async events as they happen (ibv_asyncwatch)", Run: inspect.RunAsyncwatch},
	{Name: "rping", Summary: "RDMA ping through the connection manager (librdmacm's rping)", Run: cmtools.RunRping},
	{Name: "ucmatose", Summary: "RC connections and messages through the connection manager (librdmacm's cmatose)", Run: cmtools.RunUcmatose},
	{Name: "rdma_server", Summary: "accept one connection, receive a message and send one back (librdmacm's rdma_server)", Run: cmtools.RunRdmaServer},
	{Name: "rdma_client", Summary: "connect, send a message and receive the reply (librdmacm's rdma_client)", Run: cmtools.RunRdmaClient},
	{Name: "cmtime", Summary: "time each step of opening and closing many connections at once (librdmacm's cmtime)", Run: cmtools.RunCmtime},
	{Name: "udaddy", Summary: "UD datagrams to a service found through the connection manager (librdmacm's udaddy)", Run: cmtools.RunUdaddy},
	{Name: "rstream", Summary: "stream bandwidth and latency over rdmanet, or Go TCP with --tcp (librdmacm's rstream)", Run: rstream.Run},
	{Name: "udpong", Summary: "datagram latency and bandwidth over rdmanet's datagram rsockets, or Go UDP with -T s (librdmacm's udpong)", Run: rstream.RunUdpong},
	{Name: "ibstat", Summary: "device and port state, rate, LIDs and GUIDs (infiniband-diags' ibstat)", Run: inspect.RunIbstat},
	{Name: "ibstatus", Summary: "each port's default GID, state and rate (infiniband-diags' ibstatus)", Run: inspect.RunIbstatus},
	{Name: "ibaddr", Summary: "a local port's GID and LID range (infiniband-diags' ibaddr)", Run: inspect.RunIbaddr},
	{Name: "iblinkinfo", Summary: "each device's port, its interface, MTU and speed (infiniband-diags' iblinkinfo)", Run: inspect.RunIblinkinfo},
	{Name: "ibping", Summary: "ping a device's QP1 with a vendor-class MAD; -S answers (infiniband-diags' ibping)", Run: ibping.Run},
	{Name: "mckey", Summary: "UD datagrams to a multicast group joined through the connection manager (librdmacm's mckey)", Run: cmtools.RunMckey},
}

// lookup returns the command called name.
func lookup(name string) (*tool.Command, bool) {
	for _, c := range commands {
		if c.Name == name {
			return c, true
		}
	}
	return nil, false
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: goverbs COMMAND [flags] [server address]\n\ncommands:\n")
	sorted := slices.SortedFunc(slices.Values(commands), func(a, b *tool.Command) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range sorted {
		fmt.Fprintf(w, "  %-13s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintf(w, "\nRun 'goverbs help COMMAND' (or 'goverbs COMMAND -h') for a command's flags.\n")
}

func main() {
	stop := startProfile(os.Getenv("GOVERBS_CPUPROFILE"))
	status := run(os.Args[1:])
	stop()
	netio.TraceReport(os.Stderr) // a goverbs_trace build only: where the latency went
	os.Exit(status)
}

// startProfile writes a CPU profile of the command to path (GOVERBS_CPUPROFILE), as
// go test's -cpuprofile does, for `go tool pprof` and for the profile-guided build
// (default.pgo, made by bench/pgo.sh from such profiles). It returns the function that
// ends it; with no path it does nothing. A profile that cannot start is one line on
// stderr, and the command runs without it.
func startProfile(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "goverbs: GOVERBS_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "goverbs: GOVERBS_CPUPROFILE: %v\n", err)
		}
	}
}

// run executes one command line and returns the process exit status. Every failure is
// one line on stderr.
func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	name := strings.TrimPrefix(strings.TrimPrefix(args[0], "ib_"), "ibv_")
	if name == "-h" || name == "--help" || name == "help" {
		if len(args) < 2 {
			usage(os.Stdout)
			return 0
		}
		// goverbs help COMMAND: that command's own help page.
		return run([]string{args[1], "-h"})
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "goverbs: unknown command %q (run 'goverbs help')\n", args[0])
		return 2
	}
	err := cmd.Run(cmd, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, tool.ErrHelp):
		return 0
	case errors.Is(err, tool.ErrInterrupted):
		fmt.Fprintf(os.Stderr, "goverbs %s: interrupted\n", name)
		return 130
	case errors.Is(err, tool.ErrUsage):
		// The flag package has already printed the problem and the usage.
		return 2
	}
	fmt.Fprintf(os.Stderr, "goverbs %s: %v\n", name, err)
	return 1
}
