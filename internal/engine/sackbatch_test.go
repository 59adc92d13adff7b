package engine

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// sendLog is a Conn that records the request PSNs of each WriteBatch call: which packets
// left together, in one send.
type sendLog struct {
	*netiotest.Conn
	mu    sync.Mutex
	calls [][]wire.PSN
	n     int // request packets written
}

func (c *sendLog) WriteBatch(msgs []netio.Message) (int, error) {
	var psns []wire.PSN
	for i := range msgs {
		msgs[i].Segments(func(_ int, b []byte) bool {
			var p wire.Packet
			if _, ok := p.TryParse(b, wire.MTU4096.Bytes()); ok && p.Op.Flags.Has(wire.Request) {
				psns = append(psns, p.BTH.PSN())
			}
			return true
		})
	}
	c.mu.Lock()
	if len(psns) > 0 {
		c.calls = append(c.calls, psns)
		c.n += len(psns)
	}
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

func (c *sendLog) take() [][]wire.PSN {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.calls
	c.calls = nil
	return k
}

func (c *sendLog) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestSACKResendsLeaveTogether: the SACKs of one receive batch that reveal losses queue
// their resends, and the requester sends them all in one send at the end of the batch,
// not one send per SACK. The requester's batch is the unit of sending, as it is for ACKs
// (srRunDue): at 1% loss over the veth pair (TestVethLoss) a SACK that queued a resend
// ran the requester at once, and the lossy rounds made about a fifth more sends than the
// lossless ones, each carrying fewer packets, on the goroutine whose sends carry the
// kernel's whole veth path and bound the stream (docs/congestion.md, "Where the lossy
// rounds' time goes").
func TestSACKResendsLeaveTogether(t *testing.T) {
	conn := &sendLog{Conn: netiotest.NewConn(fuzzLocal)}
	dev, err := New(Config{Name: "sackbatch", Conn: conn, MTU: wire.MTU1024, SelectiveRepeat: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, _ := dev.allocPD()
	cq, _ := dev.newCQ(16)
	qp, err := dev.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: driver.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	rcUp(t, qp, fuzzPeer.Addr(), fuzzPeerQPN, 0, fuzzSQPSN)
	const packets = 40 // of 1 KiB, all within the window
	buf := make([]byte, packets<<10)
	mr, err := pd.regMR(buf, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	must(t, qp.PostSend([]driver.SendWR{{ID: 1, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: mr.Addr(), Length: uint32(len(buf)), LKey: mr.LKey()}}, RemoteAddr: 0x1000, RKey: 0x1234}}))
	waitWritten(t, conn, packets)
	conn.take()

	// One receive batch of four SACKs for the expected PSN (0, lost), each naming a run of
	// kept PSNs beyond a new gap: 2-5, 7-10, 12-15, 17-20. Lost: 0, 1, 6, 11, 16.
	first := wire.PSN(fuzzSQPSN)
	var msgs []netio.Message
	for _, run := range [][2]uint32{{2, 5}, {7, 10}, {12, 15}, {17, 20}} {
		msgs = append(msgs, sackFrom(qp.QPN(), first, first.Add(run[0]), first.Add(run[1])))
	}
	conn.Deliver(msgs, len(msgs))
	want := []wire.PSN{first, first.Add(1), first.Add(6), first.Add(11), first.Add(16)}
	waitWritten(t, conn, packets+len(want))
	calls := conn.take()
	var got []wire.PSN
	for _, c := range calls {
		got = append(got, c...)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("resent %v, want %v", got, want)
	}
	if len(calls) != 1 {
		t.Fatalf("the resends left in %d sends %v, want one at the end of the receive batch", len(calls), calls)
	}
}

// sackFrom is a SACK from the peer to QP qpn (selective.go's wire form): expected is
// missing, first to last were kept.
func sackFrom(qpn uint32, expected, first, last wire.PSN) netio.Message {
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCAck, PKey: 0xffff, DestQP: qpn, PSN: expected,
		Resv8a: srSACKFlag, Resv7: uint8(last.Diff(first))}}
	h.AETH = wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKPSNSeqError), MSN: uint32(last)}
	b := make([]byte, 64)
	n := wire.Finish(b, h.Encode(b), 0)
	ip := wire.IPHeader{Src: fuzzPeer.Addr(), Dst: fuzzLocal.Addr(), SrcPort: fuzzPeer.Port(), DstPort: fuzzLocal.Port(), DF: true}
	wire.PutICRC(&ip, b, n)
	return netio.Message{Buf: b, N: n + wire.ICRCLen, Addr: fuzzPeer}
}

// waitWritten waits until conn has written n request packets (the requester may send
// from another goroutine).
func waitWritten(t *testing.T, conn *sendLog, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); conn.written() < n; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the device sent %d request packets, want %d", conn.written(), n)
		}
	}
}
