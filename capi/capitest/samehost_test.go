package capitest

import (
	"strconv"
	"strings"
	"testing"
)

// TestSameHostByDefault: the C flavour's devices have the same-host shortcut by default,
// as a Go program's own devices do (it opens them through the same provider): Debian's
// ibv_rc_pingpong on the library, against goverbs' Go rc_pingpong on this host, exchange
// their datagrams through shared memory, and the Go side's path line says so. With
// GOVERBS_SHM=0 in the C program's environment its device serves no rendezvous, and the
// Go side reaches it by UDP.
func TestSameHostByDefault(t *testing.T) {
	lib := library(t)
	cbin := program(t, "ibv_rc_pingpong")
	gobin := goverbsTool(t)
	for _, tc := range []struct {
		env  string
		want string
	}{
		{"", "path: same-host shared memory for all "},
		{"0", "path: UDP for all "},
	} {
		t.Run("GOVERBS_SHM="+tc.env, func(t *testing.T) {
			port, sa, ca := freePort(t), newAddr(), newAddr()
			common := []string{"-g", "0", "-p", strconv.Itoa(port), "-n", "50", "-s", "3000"}
			srv := proc{append([]string{cbin, "-d", "s0"}, common...), append(onGoverbs(lib, "s0", sa), "GOVERBS_SHM="+tc.env)}
			// The Go side has the shortcut on whatever the test's environment says, so
			// that its path line tells what the C side's device did.
			cli := proc{append(append([]string{gobin, "rc_pingpong", "--bind", ca}, common...), sa), []string{"GOVERBS_SHM=1"}}
			_, cliOut := runPair(t, port, srv, cli)
			if !strings.Contains(cliOut, tc.want) {
				t.Fatalf("the Go side's output lacks %q:\n%s", tc.want, cliOut)
			}
		})
	}
}
