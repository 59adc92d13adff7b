package engine

import (
	"bytes"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/wire"
)

// TestGSIOverUDP: a MAD sent with SendMAD arrives, byte for byte, at the handler of the
// device it was sent to, with the sender's address; a device without a handler drops
// it as "no QP".
func TestGSIOverUDP(t *testing.T) {
	a, b := openUDPDevice(t), openUDPDevice(t)
	aAddr, bAddr := a.local.Addr(), b.local.Addr()
	type got struct {
		from netip.Addr
		mad  []byte
	}
	ch := make(chan got, 4)
	b.SetMADHandler(func(from netip.Addr, mad []byte) { ch <- got{from, bytes.Clone(mad)} })
	mad := make([]byte, MADLen)
	for i := range mad {
		mad[i] = byte(i)
	}
	for range 2 {
		if err := a.SendMAD(bAddr, mad); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-ch:
			if g.from != aAddr || !bytes.Equal(g.mad, mad) {
				t.Fatalf("got %v %x", g.from, g.mad[:8])
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no MAD")
		}
	}
	if err := a.SendMAD(bAddr, mad[:255]); !errors.Is(err, ErrMADLength) {
		t.Fatal(err)
	}
	before := a.counters.NoQP.Load()
	b.SendMAD(aAddr, mad)
	for deadline := time.Now().Add(5 * time.Second); a.counters.NoQP.Load() == before; {
		if time.Now().After(deadline) {
			t.Fatal("a MAD to a device with no GSI handler was not counted as no QP")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGSIDropsWhatIsNotAMAD: only a UD SEND_ONLY of 256 bytes with QP1's Q_Key reaches
// the handler; the rest is dropped under its reason.
func TestGSIDropsWhatIsNotAMAD(t *testing.T) {
	conn := netiotest.NewConn(fuzzLocal) // nothing is injected: the input is this test's
	dev, err := New(Config{Name: "gsi", Conn: conn, MTU: wire.MTU4096})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	delivered := 0
	dev.SetMADHandler(func(from netip.Addr, mad []byte) {
		if from != fuzzPeer.Addr() || len(mad) != MADLen {
			t.Errorf("handler got %v, %d bytes", from, len(mad))
		}
		delivered++
	})
	build := func(op wire.Opcode, qkey uint32, n int) []byte {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: 0xffff, DestQP: GSIQPN},
			DETH: wire.DETHFields{QKey: qkey, SrcQP: GSIQPN}}
		b := make([]byte, h.Len()+n+3+wire.ICRCLen)
		end := wire.Finish(b, h.Encode(b), n)
		ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
		wire.PutICRC(&ip, b, end)
		return b[:end+wire.ICRCLen]
	}
	c := &dev.counters
	for _, tc := range []struct {
		name    string
		pkt     []byte
		counter *atomic.Uint64
	}{
		{"a MAD", build(wire.UDSendOnly, GSIQKey, MADLen), nil},
		{"wrong Q_Key", build(wire.UDSendOnly, 0x11111111, MADLen), &c.BadQKey},
		{"short", build(wire.UDSendOnly, GSIQKey, 200), &c.Malformed},
		{"long", build(wire.UDSendOnly, GSIQKey, 260), &c.Malformed},
		{"with immediate", build(wire.UDSendOnlyImm, GSIQKey, MADLen), &c.Malformed},
	} {
		var before uint64
		if tc.counter != nil {
			before = tc.counter.Load()
		}
		was := delivered
		dev.input(tc.pkt, fuzzPeer, 0)
		switch {
		case tc.counter == nil && delivered != was+1:
			t.Errorf("%s: not delivered", tc.name)
		case tc.counter != nil && (delivered != was || tc.counter.Load() != before+1):
			t.Errorf("%s: delivered %d, counter %d → %d", tc.name, delivered-was, before, tc.counter.Load())
		}
	}
	dev.SetMADHandler(nil)
	before := c.NoQP.Load()
	dev.input(build(wire.UDSendOnly, GSIQKey, MADLen), fuzzPeer, 0)
	if c.NoQP.Load() != before+1 || delivered != 1 {
		t.Fatal("a MAD after the handler was removed was not dropped as no QP")
	}
}
