package afxdp

import (
	"slices"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		spec    string
		iface   string
		queue   int
		queues  []int
		ok      bool
		generic bool
	}{
		{"xdp:eth0", "eth0", 0, nil, true, false},
		{"xdp:enp1s0f0/3", "enp1s0f0", 3, nil, true, false},
		{"xdp:va/0", "va", 0, nil, true, false},
		{"xdp:eth0/2-5", "eth0", 2, []int{3, 4, 5}, true, false},
		{"xdp:eth0/4-4", "eth0", 4, nil, true, false},
		{"eth0", "", 0, nil, false, false},
		{"xdp:", "", 0, nil, false, false},
		{"xdp:/1", "", 0, nil, false, false},
		{"xdp:eth0/", "", 0, nil, false, false},
		{"xdp:eth0/-1", "", 0, nil, false, false},
		{"xdp:eth0/x", "", 0, nil, false, false},
		{"xdp:eth0/5-2", "", 0, nil, false, false},
		{"xdp:eth0/0-16", "", 0, nil, false, false},
		{"xdp:eth0/0-", "", 0, nil, false, false},
		{"xdp:a-name-far-too-long", "", 0, nil, false, false},
		{"xdp:va/0+generic", "va", 0, nil, true, true},
		{"xdp:va+generic", "va", 0, nil, true, true},
		{"xdp:eth0/2-3+generic", "eth0", 2, []int{3}, true, true},
		{"xdp:va/0+native", "", 0, nil, false, false},
		{"xdp:va/0+", "", 0, nil, false, false},
		{"xdp:va/0+generic+generic", "va", 0, nil, true, true},
	} {
		o, err := ParseSpec(c.spec)
		if (err == nil) != c.ok || c.ok && (o.Interface != c.iface || o.Queue != c.queue || !slices.Equal(o.Queues, c.queues) || o.GenericXDP != c.generic) {
			t.Errorf("ParseSpec(%q) = %+v, %v", c.spec, o, err)
		}
	}
}
