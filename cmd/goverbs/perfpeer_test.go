package main

import (
	"strings"
	"testing"
)

// TestPerftestExchange runs every perf tool with perftest's own exchange on both sides
// (--perftest-exchange: the goverbs mark is not sent, so each side follows the message
// sequence of perftest's program for that test, as against a real perftest). Both
// sides must agree step by step, or a side waits for a message that never comes. The
// proof against real perftest is in docs/INTEROP.md.
func TestPerftestExchange(t *testing.T) {
	for _, c := range []struct {
		tool      string
		args      []string
		serverRow bool // the server prints a result row too
	}{
		{"write_bw", []string{"-n", "100", "-s", "4096"}, true}, // the client's report
		{"read_bw", []string{"-n", "100", "-s", "100", "-q", "2"}, true},
		{"atomic_bw", []string{"-n", "100", "-A", "CMP_AND_SWAP"}, true},
		{"send_bw", []string{"-n", "100", "-s", "4096"}, true},
		{"send_bw", []string{"-a", "-n", "3"}, true},
		{"send_lat", []string{"-n", "100"}, true},
		{"write_lat", []string{"-n", "100", "-s", "64"}, true},
		{"write_bw", []string{"-b", "-n", "100", "-s", "4096"}, true},
		{"read_bw", []string{"-b", "-a", "-n", "3"}, true},
		{"send_bw", []string{"-b", "-n", "100", "-s", "4096"}, true},
		{"read_lat", []string{"-n", "100"}, false},
		{"atomic_lat", []string{"-n", "100"}, false},
	} {
		t.Run(c.tool+strings.Join(c.args, ""), func(t *testing.T) {
			srv, cli := perfPair(t, c.tool, append(c.args, "--perftest-exchange")...)
			mustSucceed(t, c.tool+" server", srv)
			mustSucceed(t, c.tool+" client", cli)
			if lastRow(cli.stdout) == "" && !strings.Contains(cli.stdout, " 100     ") {
				t.Errorf("client printed no result:\n%s", cli.stdout)
			}
			if c.serverRow && !strings.Contains(srv.stdout, "#bytes") {
				t.Errorf("server printed no table:\n%s", srv.stdout)
			}
			mustContain(t, "client", cli.stdout, " remote address: LID 0000 QPN 0x")
		})
	}
	// A goverbs server adopts a goverbs client's parameters; with perftest's exchange
	// nothing is sent, so the sides run with their own flags, as perftest's do.
	srv, cli := perfPair(t, "write_bw", "-n", "100", "-s", "1000", "--perftest-exchange")
	mustSucceed(t, "server", srv)
	mustContain(t, "write_bw server", srv.stdout, " 1000       100 ") // the client's report
	mustSucceed(t, "client", cli)
}
