//go:build linux

package afxdp

import (
	"errors"
	"strings"
	"testing"
)

func TestMissingCapabilities(t *testing.T) {
	all := uint64(1)<<capNetAdmin | 1<<capNetRaw | 1<<capBPF
	for _, c := range []struct {
		eff  uint64
		want string
	}{
		{all, ""},
		{all&^(1<<capBPF) | 1<<capSysAdmin, ""}, // CAP_SYS_ADMIN covers BPF, as in the kernel
		{all &^ (1 << capBPF), "CAP_BPF"},
		{all &^ (1 << capNetRaw), "CAP_NET_RAW"},
		{all &^ (1 << capNetAdmin), "CAP_NET_ADMIN"},
		{0, "CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW"},
	} {
		err := missingCapabilities(c.eff)
		if c.want == "" {
			if err != nil {
				t.Errorf("%#x: %v", c.eff, err)
			}
			continue
		}
		var ce *CapabilityError
		if !errors.As(err, &ce) || strings.Join(ce.Missing, ", ") != c.want || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%#x: %v, want %s missing", c.eff, err, c.want)
		}
	}
}
