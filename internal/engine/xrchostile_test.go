package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestXRCTargetHostileInput feeds an XRC_RECV QP in RTS what a peer could send it: a
// request naming no SRQ, a basic SRQ or an SRQ of another domain (NAKed and counted),
// RC and response opcodes (dropped as another transport), and mutated XRC requests with
// valid ICRCs (never a panic; nothing completes in an SRQ without its buffers).
func TestXRCTargetHostileInput(t *testing.T) {
	conn := netiotest.NewConn(fuzzLocal) // nothing is injected: the input is this test's
	dev, err := New(Config{Name: "xrchostile", Conn: conn, MTU: wire.MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.allocPD()
	cq, _ := dev.newCQ(64)
	open := func() *XRCD {
		x, err := dev.OpenXRCD(-1, 0)
		if err != nil {
			t.Fatal(err)
		}
		return x.(*XRCD)
	}
	mine, other := open(), open()
	xsrq := func(x *XRCD) *SRQ {
		s, err := pd.CreateXRCSRQ(x, cq, driver.SRQAttr{MaxWR: 4, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		return s.(*SRQ)
	}
	good, foreign := xsrq(mine), xsrq(other)
	basic, err := dev.CreateSRQ(pd, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := mine.CreateQP(&driver.QPInit{Type: driver.QPTypeXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	tgt := q.(*QP)
	send := func(op wire.Opcode, psn wire.PSN, srqn uint32) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: 0xffff, DestQP: tgt.QPN(), PSN: psn}, XRCSRQN: srqn}
		b := make([]byte, h.Len()+8+3+wire.ICRCLen)
		hl := h.Encode(b)
		n := hl
		if op.Info().Flags.Has(wire.HasPayload) {
			n = wire.Finish(b, hl, 8)
		}
		ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
		wire.PutICRC(&ip, b, n)
		return b[:n+wire.ICRCLen]
	}
	up := func() {
		rcUp(t, tgt, fuzzPeer.Addr(), fuzzPeerQPN, 0, 0)
	}
	reset := func() {
		must(t, tgt.Modify(&driver.QPAttr{State: driver.QPStateReset}, driver.QPAttrState))
		up()
	}
	up()
	c := &dev.counters
	for _, tc := range []struct {
		name    string
		srqn    uint32
		counter func() uint64
	}{
		{"no such SRQ", 0xabcdef, c.XRCBadSRQN.Load},
		{"basic SRQ", basic.Num(), c.XRCBadSRQN.Load},
		{"other domain", foreign.Num(), c.XRCDomainViolation.Load},
	} {
		before := tc.counter()
		dev.input(send(wire.XRCSendOnly, 0, tc.srqn), fuzzPeer, 0)
		if tc.counter() != before+1 || tgt.State() != driver.QPStateErr {
			t.Errorf("%s: counter %d -> %d, QP %v", tc.name, before, tc.counter(), tgt.State())
		}
		reset()
	}
	before := c.BadTransport.Load()
	dev.input(send(wire.RCSendOnly, 0, 0), fuzzPeer, 0)
	dev.input(send(wire.XRCAck, 0, 0), fuzzPeer, 0)
	if got := c.BadTransport.Load() - before; got != 2 {
		t.Errorf("an RC request and an XRC ACK at an XRC_RECV QP: %d counted as another transport's, want 2", got)
	}
	// Mutated requests, re-signed so that they pass the ICRC and reach the QP's checks.
	rng := rand.New(rand.NewPCG(1, 2))
	ops := []wire.Opcode{wire.XRCSendOnly, wire.XRCSendFirst, wire.XRCWriteOnly, wire.XRCReadRequest, wire.XRCFetchAdd, wire.XRCSendOnlyImm}
	for i := range 3000 {
		b := mutate(rng, send(ops[i%len(ops)], wire.PSN(rng.IntN(3)), []uint32{good.Num(), foreign.Num(), rng.Uint32()}[rng.IntN(3)]))
		if len(b) >= wire.ICRCLen {
			ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
			wire.PutICRC(&ip, b, len(b)-wire.ICRCLen)
		}
		dev.input(b, fuzzPeer, 0)
		if i%100 == 0 {
			reset()
		}
	}
	var wcs [8]driver.WC
	if n, _ := cq.Poll(wcs[:]); n != 0 {
		t.Errorf("completions without posted receives: %+v", wcs[:n])
	}
}
