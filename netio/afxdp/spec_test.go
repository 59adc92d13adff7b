package afxdp

import "testing"

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		spec  string
		iface string
		queue int
		ok    bool
	}{
		{"xdp:eth0", "eth0", 0, true},
		{"xdp:enp1s0f0/3", "enp1s0f0", 3, true},
		{"xdp:va/0", "va", 0, true},
		{"eth0", "", 0, false},
		{"xdp:", "", 0, false},
		{"xdp:/1", "", 0, false},
		{"xdp:eth0/", "", 0, false},
		{"xdp:eth0/-1", "", 0, false},
		{"xdp:eth0/x", "", 0, false},
		{"xdp:a-name-far-too-long", "", 0, false},
	} {
		o, err := ParseSpec(c.spec)
		if (err == nil) != c.ok || c.ok && (o.Interface != c.iface || o.Queue != c.queue) {
			t.Errorf("ParseSpec(%q) = %+v, %v", c.spec, o, err)
		}
	}
}
