package main

import (
	"strings"
	"testing"
	"time"
)

func TestSoakCommand(t *testing.T) {
	r := runBin(t, 60*time.Second, "soak", "-n", "2000", "--faults", "each", "-q")
	if r.code != 0 || strings.Count(r.stdout, "verified:") != 8 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"== soak loss", "link soakA/1 sent_pkts ", " retransmits ", " rcvd_icrc_err ", " duplicate_request "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runBin(t, 60*time.Second, "soak", "-n", "500", "--loss", "0.05", "--delay", "30us", "-q")
	if r.code != 0 || !strings.Contains(r.stdout, "== soak custom: loss 5.0%, delay 30µs") {
		t.Fatalf("custom faults: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, 10*time.Second, "soak", "--faults", "bogus")
	if r.code != 1 || !strings.Contains(r.stderr, `unknown fault preset "bogus"`) {
		t.Fatalf("bad preset: exit %d\n%s", r.code, r.stderr)
	}
}
