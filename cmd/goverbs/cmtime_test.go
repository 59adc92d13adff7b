package main

import (
	"testing"
	"time"
)

// TestCmtime runs cmtime's server and a client opening twenty connections at once, twice
// (the server, as cmtime's, serves until stopped): the client prints every step and the
// table of their times.
func TestCmtime(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	s := startServer(t, "cmtime: listening", "cmtime", "-b", a, "-p", port)
	for range 2 {
		cli := runBin(t, 60*time.Second, "cmtime", "-s", a, "-b", b, "-p", port, "-c", "20")
		mustSucceed(t, "client", cli)
		mustContain(t, "client", cli.stdout, "creating id\nbinding source address\nresolving address\nresolving route\n"+
			"creating qp\nconnecting\ndisconnecting\ndestroying id\n"+
			"step              total ms     max ms     min us  us / conn\n")
		mustMatch(t, "client", cli.stdout, `(?m)^create id    : +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d$`,
			`(?m)^bind addr    : `, `(?m)^connect      : +\d+\.\d\d +\d+\.\d\d +[1-9]\d*\.\d\d +\d+\.\d\d$`,
			`(?m)^disconnect   : `, `(?m)^destroy      : `)
	}
	select {
	case <-s.done:
		r := s.wait(t)
		t.Fatalf("the server exited while serving:\n%s%s", r.stdout, r.stderr)
	default:
	}
}
