package engine_test

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// offloadingConn answers OffloadsICRC with off for every destination (as a same-host
// Conn with a pair to it would) and keeps a copy of each datagram written, with its
// SameHost mark.
type offloadingConn struct {
	*netiotest.Conn
	off  netio.ICRCOffload
	mu   sync.Mutex
	sent []sentDatagram
}

type sentDatagram struct {
	unsealed bool
	dgram    []byte
}

func (c *offloadingConn) OffloadsICRC(netip.AddrPort) netio.ICRCOffload { return c.off }
func (c *offloadingConn) ICRCOffloadGen() uint64                        { return 1 }

func (c *offloadingConn) WriteBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	for i := range msgs {
		d := make([]byte, msgs[i].N)
		msgs[i].CopyData(d, 0)
		c.sent = append(c.sent, sentDatagram{msgs[i].SameHost, d})
	}
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

// TestUnsealedFollowsTheQPN: a device leaves the ICRC out of a datagram exactly where
// its Conn said the destination takes it unsealed: to every QPN (OffloadAll), to QPNs of
// top byte 0 only (OffloadLowQPNs: a steered peer, goverbs serve's device, whose ring
// takes its own engine's QPNs and whose others go by UDP to engines that check), or to
// none; every other datagram carries a valid ICRC.
func TestUnsealedFollowsTheQPN(t *testing.T) {
	const qkey = 0x11111111
	low, high := uint32(0x000011), uint32(0x120011) // top bytes 0 and 0x12
	for _, c := range []struct {
		off         netio.ICRCOffload
		lowU, highU bool
	}{
		{netio.OffloadNone, false, false},
		{netio.OffloadAll, true, true},
		{netio.OffloadLowQPNs, true, false},
	} {
		ea := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 10, 1, 2}), 4791)
		ec := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 10, 1, 3}), 4791)
		pa, pc := netiotest.Pipe(ea, ec)
		oc := &offloadingConn{Conn: pa, off: c.off}
		a := newHostCfg(t, verbs.SoftConfig{Addr: ea.Addr(), Conn: oc})
		peer := newHostCfg(t, verbs.SoftConfig{Addr: ec.Addr(), Conn: pc})
		qa := udQP(t, a, qkey)
		ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: peer.GID, Port: 1, HopLimit: 64})
		if err != nil {
			t.Fatal(err)
		}
		src := a.MR(t, 64, allAccess)
		for i, qpn := range []uint32{low, high} {
			src.Buf()[0] = byte(i + 1)
			wr := verbs.SendWR{ID: uint64(qpn), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{src.SGE(0, 8)}, AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}
			if err := qa.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			if wc := softtest.WaitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
				t.Fatalf("%v: send to QPN %#x: %v", c.off, qpn, wc.Status)
			}
		}
		ip := wire.IPHeader{Src: ea.Addr(), Dst: ec.Addr(), SrcPort: ea.Port(), DstPort: ec.Port(), DF: true}
		oc.mu.Lock()
		sent := oc.sent
		oc.mu.Unlock()
		want := map[uint32]bool{low: c.lowU, high: c.highU}
		seen := map[uint32]bool{}
		for _, s := range sent {
			if len(s.dgram) < wire.BTHLen+wire.ICRCLen {
				continue
			}
			qpn := uint32(s.dgram[5])<<16 | uint32(s.dgram[6])<<8 | uint32(s.dgram[7])
			w, ours := want[qpn]
			if !ours {
				continue
			}
			seen[qpn] = true
			icrc := binary.LittleEndian.Uint32(s.dgram[len(s.dgram)-wire.ICRCLen:])
			switch {
			case s.unsealed != w:
				t.Errorf("%v: datagram to QPN %#x marked unsealed %v, want %v", c.off, qpn, s.unsealed, w)
			case w && icrc != 0:
				t.Errorf("%v: unsealed datagram to QPN %#x carries ICRC %#x, want 0", c.off, qpn, icrc)
			case !w && !wire.CheckICRC(&ip, s.dgram):
				t.Errorf("%v: datagram to QPN %#x has a wrong ICRC: % x", c.off, qpn, s.dgram)
			}
		}
		if !seen[low] || !seen[high] {
			t.Errorf("%v: datagrams seen for QPN %#x: %v, %#x: %v", c.off, low, seen[low], high, seen[high])
		}
	}
}
