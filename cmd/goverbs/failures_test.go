package main

import (
	"testing"
)

// The failures a new user hit (issue 17), each run as that user ran it: the built
// binary, server and client in two processes.

// TestManyQPs: write_bw -q 64 (the help allows 1..256) failed with "couldn't create CQ of
// depth 32769". The CQs are sized as perftest sizes them, and fit the device's limit.
func TestManyQPs(t *testing.T) {
	for _, tool := range []string{"write_bw", "send_bw"} {
		srv, cli := perfPair(t, tool, "-q", "64", "-n", "20", "-s", "256")
		mustSucceed(t, tool+" -q 64 server", srv)
		mustSucceed(t, tool+" -q 64 client", cli)
		mustContain(t, tool+" -q 64 client", cli.stdout, " Number of qps   : 64", " 256        20 ")
	}
	srv, cli := perfPair(t, "send_bw", "-q", "256", "-n", "10", "-s", "64")
	mustSucceed(t, "send_bw -q 256 server", srv)
	mustSucceed(t, "send_bw -q 256 client", cli)
	mustContain(t, "send_bw -q 256 client", cli.stderr, "rx depth lowered to 127 so that 256 QPs fit one CQ of 32767 entries")
}
