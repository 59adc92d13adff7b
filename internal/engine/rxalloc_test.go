package engine

import (
	"testing"

	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/wire"
)

// TestDroppedPacketsAllocateNothing: a packet the receive path drops (for a QP that does
// not exist, with a bad ICRC, or malformed) costs no allocation, so a flood of them
// costs the garbage collector nothing either.
func TestDroppedPacketsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	conn := netiotest.NewConn(fuzzLocal) // nothing is injected: the input is this test's
	dev, err := New(Config{Name: "rxalloc", Conn: conn, MTU: wire.MTU4096})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x777777, PSN: 1}}
	noQP := make([]byte, h.Len()+8+wire.ICRCLen)
	n := wire.Finish(noQP, h.Encode(noQP), 8)
	ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
	wire.PutICRC(&ip, noQP, n)
	badICRC := append([]byte(nil), noQP...)
	badICRC[len(badICRC)-1] ^= 1
	malformed := []byte{0xff, 1, 2}
	before := dev.counters.NoQP.Load()
	// The receive loop is parked in the Conn's ReadBatch, so input is this test's.
	for _, c := range []struct {
		name string
		pkt  []byte
	}{{"no such QP", noQP}, {"bad ICRC", badICRC}, {"malformed", malformed}} {
		if a := testing.AllocsPerRun(100, func() { dev.input(c.pkt, fuzzPeer, 0) }); a != 0 {
			t.Errorf("%s: %v allocations per packet", c.name, a)
		}
	}
	if dev.counters.NoQP.Load() == before {
		t.Error("the packet for no QP was not counted as such: the test does not reach the QP lookup")
	}
}
