//go:build linux

package netio

import "testing"

// TestCapsOffloadLimits: the GSO and GRO limits travel in Caps, and a Conn without the
// offload says so (one segment per send, no byte budget, no GRO buffer), so that a sender
// sizing its runs from Caps never builds one the Conn would not send whole.
func TestCapsOffloadLimits(t *testing.T) {
	on := listen(t, "127.0.0.2:0", UDPOptions{})
	off := listen(t, "127.0.0.2:0", UDPOptions{DisableGSO: true, DisableGRO: true})
	if c := off.Caps(); c.GSO || c.GRO || c.MaxSegments != 1 || c.MaxGSOBytes != 0 || c.GROBufSize != 0 {
		t.Errorf("offloads disabled: %+v", c)
	}
	c := on.Caps()
	if c.GSO && (c.MaxSegments != MaxGSOSegments || c.MaxGSOBytes != maxGSOBytes) {
		t.Errorf("GSO on: MaxSegments %d MaxGSOBytes %d", c.MaxSegments, c.MaxGSOBytes)
	}
	if c.GRO && c.GROBufSize != MaxGROSize {
		t.Errorf("GRO on: GROBufSize %d", c.GROBufSize)
	}
	if !c.GSO || !c.GRO {
		t.Logf("kernel without UDP GSO/GRO: %+v", c)
	}
}
