package netio

import "testing"

// TestCapsReport logs what the kernel accepted; run it unprivileged too
// (it must pass either way: buffers never make ListenUDP fail).
func TestCapsReport(t *testing.T) {
	for _, addr := range []string{"127.0.0.2:0", "[::1]:0"} {
		c := listen(t, addr, UDPOptions{})
		t.Logf("%s: %+v", addr, c.Caps())
		if c.Caps().RecvBuf <= 0 || c.Caps().SendBuf <= 0 {
			t.Errorf("buffer sizes not reported: %+v", c.Caps())
		}
		big := listen(t, addr, UDPOptions{RecvBuf: 256 << 20, SendBuf: 64 << 20})
		t.Logf("%s asking 256 MiB/64 MiB: RecvBuf=%d SendBuf=%d", addr, big.Caps().RecvBuf, big.Caps().SendBuf)
	}
}
