package main

import (
	"strings"
	"testing"
)

// TestUcmatose runs cmatose's server and client as two processes with three
// connections and twenty messages each way on each.
func TestUcmatose(t *testing.T) {
	a, b := addrPair(t)
	sr, cli := runCMPair(t, "cmatose: starting server", []string{"ucmatose", "-b", a, "-c", "3", "-C", "20"},
		[]string{"ucmatose", "-s", a, "-b", b, "-c", "3", "-C", "20", "--stats"})
	mustContain(t, "client", cli.stdout, "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\n"+
		"sending replies\ndata transfers complete\ntest complete\nreturn status 0\n")
	mustContain(t, "server", sr.stdout, "initiating data transfers\ncompleting sends\nreceiving data transfers\n"+
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n")
	// Three REQs and RTUs sent, three REPs and DREQs received, three DREPs sent.
	mustContain(t, "client", cli.stderr, "mads_sent 9 mads_rcvd 6 mads_dropped 0")
	if strings.Count(cli.stderr, "link ") != 1 {
		t.Errorf("client --stats:\n%s", cli.stderr)
	}
}
