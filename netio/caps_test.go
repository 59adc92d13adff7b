package netio

import (
	"strings"
	"testing"
)

// TestCapsReport logs what the kernel accepted; run it unprivileged too
// (it must pass either way: buffers never make ListenUDP fail).
func TestCapsReport(t *testing.T) {
	for _, addr := range []string{"127.0.0.2:0", "[::1]:0"} {
		c := listen(t, addr, UDPOptions{})
		t.Logf("%s: %+v", addr, c.Caps())
		if w := BufferWarning(c.Caps()); w != "" {
			t.Logf("%s: %s", addr, w) // expected when unprivileged with the default sysctl limits
		}
		if c.Caps().RecvBuf <= 0 || c.Caps().SendBuf <= 0 {
			t.Errorf("buffer sizes not reported: %+v", c.Caps())
		}
		big := listen(t, addr, UDPOptions{RecvBuf: 256 << 20, SendBuf: 64 << 20})
		t.Logf("%s asking 256 MiB/64 MiB: RecvBuf=%d SendBuf=%d", addr, big.Caps().RecvBuf, big.Caps().SendBuf)
	}
}

// TestBufferWarning: a Conn whose kernel gave less buffer than asked for says so, naming
// the limit to raise; one that got what it asked for says nothing.
func TestBufferWarning(t *testing.T) {
	full := Caps{RecvBuf: 16 << 20, SendBuf: 8 << 20, RecvBufWanted: 16 << 20, SendBufWanted: 8 << 20}
	if w := BufferWarning(full); w != "" {
		t.Errorf("full buffers: %q", w)
	}
	if w := BufferWarning(Caps{RecvBuf: 1 << 20}); w != "" {
		t.Errorf("no wanted sizes (a Conn without the notion): %q", w)
	}
	capped := full
	capped.RecvBuf = 416 << 10 // net.core.rmem_max's default, doubled
	w := BufferWarning(capped)
	if !strings.Contains(w, "receive buffer 416 KiB of 16384 KiB") || !strings.Contains(w, "net.core.rmem_max") ||
		strings.Contains(w, "send buffer") {
		t.Errorf("capped receive buffer: %q", w)
	}
	capped.SendBuf = 1 << 20
	if w := BufferWarning(capped); !strings.Contains(w, "send buffer 1024 KiB of 8192 KiB") || !strings.Contains(w, "wmem_max") {
		t.Errorf("capped send buffer too: %q", w)
	}
}
