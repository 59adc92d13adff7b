//go:build linux

package attach_test

import (
	"os"
	"testing"
	"time"
)

// TestLatencyProbe measures attached ping-pong round trips in children, for work on
// the data path (GOVERBS_ATTACH_PROBE=1 runs it).
func TestLatencyProbe(t *testing.T) {
	if os.Getenv("GOVERBS_ATTACH_PROBE") == "" {
		t.Skip("GOVERBS_ATTACH_PROBE=1 runs it")
	}
	_, addr := daemon(t)
	ps := pairKids(t, addr, 1, "ping", "pong", 5000)
	start := time.Now()
	for _, k := range ps[0] {
		if l := k.readLine(t, 60*time.Second); l != "ok" {
			t.Fatal(l)
		}
	}
	t.Logf("%v per round trip", time.Since(start)/5000)
}
