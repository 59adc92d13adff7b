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
//	goverbs asyncwatch --bind 127.0.0.2                  # that tool's async events
//	goverbs rstream -b 127.0.0.2                         # stream server (rdmanet)
//	goverbs rstream -b 127.0.0.3 -s 127.0.0.2            # client; --tcp: the same over Go TCP
//	goverbs help write_bw                                # a command's flags
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/goverbs/goverbs/netio"
)

// command is one subcommand: run parses its own flags from args.
type command struct {
	summary string
	run     func(args []string) error
}

// commands is filled by init: the commands' help pages read their summaries from it.
var commands map[string]command

func init() {
	commands = map[string]command{
		"devices":      {"list software RDMA devices (ibv_devices)", runDevices},
		"devinfo":      {"show device and port attributes (ibv_devinfo)", runDevinfo},
		"rc_pingpong":  {"RC send/receive ping-pong (ibv_rc_pingpong)", pingpongCmd(ppRC)},
		"uc_pingpong":  {"UC send/receive ping-pong (ibv_uc_pingpong)", pingpongCmd(ppUC)},
		"ud_pingpong":  {"UD send/receive ping-pong (ibv_ud_pingpong)", pingpongCmd(ppUD)},
		"srq_pingpong": {"RC ping-pong over a shared receive queue (ibv_srq_pingpong)", pingpongCmd(ppSRQ)},
		"send_bw":      {"SEND bandwidth (ib_send_bw)", perfCmd(testSend, false)},
		"write_bw":     {"RDMA WRITE bandwidth (ib_write_bw)", perfCmd(testWrite, false)},
		"read_bw":      {"RDMA READ bandwidth (ib_read_bw)", perfCmd(testRead, false)},
		"atomic_bw":    {"atomic FETCH_AND_ADD or CMP_AND_SWAP bandwidth (ib_atomic_bw)", perfCmd(testAtomic, false)},
		"send_lat":     {"SEND latency (ib_send_lat)", perfCmd(testSend, true)},
		"write_lat":    {"RDMA WRITE latency (ib_write_lat)", perfCmd(testWrite, true)},
		"read_lat":     {"RDMA READ latency (ib_read_lat)", perfCmd(testRead, true)},
		"atomic_lat":   {"atomic FETCH_AND_ADD or CMP_AND_SWAP latency (ib_atomic_lat)", perfCmd(testAtomic, true)},
		"soak":         {"long verified RC stream over a simulated faulty network", runSoak},
		"version":      {"print the goverbs module version and the Go version", runVersion},
		"stat":         {"counters of running tools' devices and QPs (rdma statistic)", runStat},
		"asyncwatch":   {"a running tool's device's async events as they happen (ibv_asyncwatch)", runAsyncwatch},
		"rping":        {"RDMA ping through the connection manager (librdmacm's rping)", runRping},
		"ucmatose":     {"RC connections and messages through the connection manager (librdmacm's cmatose)", runUcmatose},
		"udaddy":       {"UD datagrams to a service found through the connection manager (librdmacm's udaddy)", runUdaddy},
		"rstream":      {"stream bandwidth and latency over rdmanet, or Go TCP with --tcp (librdmacm's rstream)", runRstream},
		"mckey":        {"UD datagrams to a multicast group joined through the connection manager (librdmacm's mckey)", runMckey},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: goverbs COMMAND [flags] [server address]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-13s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'goverbs help COMMAND' (or 'goverbs COMMAND -h') for a command's flags.\n")
}

func main() {
	status := run(os.Args[1:])
	netio.TraceReport(os.Stderr) // a goverbs_trace build only: where the latency went
	os.Exit(status)
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
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "goverbs: unknown command %q (run 'goverbs help')\n", args[0])
		return 2
	}
	err := cmd.run(args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errInterrupted):
		fmt.Fprintf(os.Stderr, "goverbs %s: interrupted\n", name)
		return 130
	case errors.Is(err, errUsage):
		// The flag package has already printed the problem and the usage.
		return 2
	}
	fmt.Fprintf(os.Stderr, "goverbs %s: %v\n", name, err)
	return 1
}
