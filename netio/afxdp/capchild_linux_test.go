//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/netio/afxdp"
)

const capChildEnv = "GOVERBS_AFXDP_CAP_CHILD"

// TestOpenWithoutCapability runs Open in child processes that setpriv(1) started
// without one capability each (dropped from the bounding set, so root's execve does not
// grant it): Open must fail with a *CapabilityError naming it, before touching anything.
func TestOpenWithoutCapability(t *testing.T) {
	if os.Getenv(capChildEnv) != "" {
		_, err := afxdp.Open(afxdp.Options{Addr: netip.MustParseAddrPort("192.0.2.1:4791")})
		var ce *afxdp.CapabilityError
		fmt.Printf("capability-error=%v: %v\n", errors.As(err, &ce), err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	for _, c := range []struct{ drop, want string }{
		{"-net_admin", "CAP_NET_ADMIN"},
		{"-net_raw", "CAP_NET_RAW"},
		{"-bpf,-sys_admin", "CAP_BPF"},
	} {
		cmd := exec.Command(setpriv, "--bounding-set", c.drop, "--", os.Args[0], "-test.run=^TestOpenWithoutCapability$", "-test.count=1")
		cmd.Env = append(os.Environ(), capChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.drop, err, out)
		}
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "capability-error=") {
				line = l
			}
		}
		if !strings.HasPrefix(line, "capability-error=true") || !strings.Contains(line, c.want) {
			t.Errorf("without %s: %q, want a CapabilityError naming %s", c.drop, line, c.want)
		}
		t.Logf("%s", line)
	}
}
