package engine

import (
	"fmt"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// qpnRunConn is gsoConn that also notes a run whose segments are for QPNs of different
// top bytes.
type qpnRunConn struct {
	gsoConn
	mixed string
}

func (c *qpnRunConn) WriteBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		var first byte
		m.Segments(func(seg int, b []byte) bool {
			if seg == 0 {
				first = b[5]
			} else if b[5] != first && c.mixed == "" {
				c.mixed = fmt.Sprintf("a run's segment %d is for QPN top byte %#x, its first for %#x", seg, b[5], first)
			}
			return true
		})
	}
	c.mu.Unlock()
	return c.gsoConn.WriteBatch(msgs)
}

// TestGSORunOneQPNTopByte: two QPs stream to one peer address, one to a QPN of top byte
// 0 and one to a QPN of top byte 1: no GSO run holds datagrams of both. goverbs serve's
// address steers by that byte (per datagram in the kernel, per run on the same-host
// rings, netio.SameHostOptions.Steered), so a run must belong to one engine there.
// Each RC QP's packets are built in a batch of their own, so this one guards the
// invariant against a change that batches QPs together; a UD QP's batch does mix
// destination QPNs (TestGSORunOneQPNTopByteUD, which fails without emit's check).
func TestGSORunOneQPNTopByte(t *testing.T) {
	conn := &qpnRunConn{gsoConn: gsoConn{Conn: netiotest.NewConn(fuzzLocal), caps: netio.Caps{BatchSize: 64, GSO: true,
		MaxSegments: 64, MaxGSOBytes: 65487, IPv4IDZero: true}}}
	cap := driver.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	dev, pd, cq, qp := rcOnConn(t, "gsoqpn", conn, wire.MTU1024, 64, cap)
	defer dev.Close()
	qp2, err := dev.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
	if err != nil {
		t.Fatal(err)
	}
	rcUp(t, qp, fuzzPeer.Addr(), 0x000100, 0, fuzzSQPSN)
	rcUp(t, qp2, fuzzPeer.Addr(), 0x010100, 0, fuzzSQPSN)
	buf := make([]byte, 16<<10)
	mr, err := pd.regMR(buf, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// Alternating small WRITEs, many at once: both QPs' packets are ready in one turn.
	const writes, packets = 8, 2 * 8 * 4 // of 4 KiB: four 1 KiB packets each
	var wrs [2][]driver.SendWR
	for i := range writes {
		for q := range wrs {
			wrs[q] = append(wrs[q], driver.SendWR{ID: uint64(i), Opcode: driver.WRRDMAWrite,
				SGL: []driver.SGE{{Addr: mr.Addr() + uint64(i%4)*4096, Length: 4096, LKey: mr.LKey()}}, RemoteAddr: 0x1000, RKey: 0x1234})
		}
	}
	must(t, qp.PostSend(wrs[0]))
	must(t, qp2.PostSend(wrs[1]))
	conn.waitSent(t, packets)
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.mixed != "" {
		t.Fatal(conn.mixed)
	}
	if conn.longest < 2 {
		t.Fatalf("longest run %d segments: runs must be used", conn.longest)
	}
}

// TestGSORunOneQPNTopByteUD: one UD QP sends to two QPs at one address, one of top byte 0
// and one of top byte 1, alternately and in one post: its datagrams are of one size and
// built in one batch, and still no GSO run holds both (without emit's check, they did).
func TestGSORunOneQPNTopByteUD(t *testing.T) {
	conn := &qpnRunConn{gsoConn: gsoConn{Conn: netiotest.NewConn(fuzzLocal), caps: netio.Caps{BatchSize: 64, GSO: true,
		MaxSegments: 64, MaxGSOBytes: 65487, IPv4IDZero: true}}}
	dev, err := New(Config{Name: "gsoqpnud", Conn: conn, MTU: wire.MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.allocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.newCQ(256)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := dev.CreateQP(pd, QPInit{Type: driver.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: driver.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	udUp(t, ud, fuzzQKey)
	ah := &AH{DGID: AddrToGID(fuzzPeer.Addr()), HopLimit: 64}
	buf := make([]byte, 4096)
	mr, err := pd.regMR(buf, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	const packets = 32
	wrs := make([]driver.SendWR, packets)
	for i := range wrs {
		wrs[i] = driver.SendWR{ID: uint64(i), Opcode: driver.WRSend, SGL: []driver.SGE{{Addr: mr.Addr(), Length: 256, LKey: mr.LKey()}},
			AH: ah, RemoteQPN: 0x000100 + uint32(i%2)<<16, RemoteQKey: fuzzQKey}
	}
	must(t, ud.PostSend(wrs))
	conn.waitSent(t, packets)
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.mixed != "" {
		t.Fatal(conn.mixed)
	}
}
