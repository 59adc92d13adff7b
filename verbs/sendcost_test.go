package verbs_test

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs"
)

// discardConn is a netio.Conn with the limits of a Linux UDP socket with GSO that
// sends nowhere: it counts the segments it is given and drops them. It receives
// nothing until closed.
type discardConn struct {
	local  netip.AddrPort
	segs   atomic.Int64
	closed chan struct{}
	once   sync.Once
}

func (c *discardConn) ReadBatch([]netio.Message) (int, error) {
	<-c.closed
	return 0, net.ErrClosed
}

func (c *discardConn) WriteBatch(msgs []netio.Message) (int, error) {
	var n int64
	for i := range msgs {
		n += int64(msgs[i].NumSegments())
	}
	c.segs.Add(n)
	return len(msgs), nil
}

func (c *discardConn) LocalAddr() netip.AddrPort  { return c.local }
func (c *discardConn) SourceAddr() netip.AddrPort { return c.local }
func (c *discardConn) Caps() netio.Caps {
	return netio.Caps{BatchSize: 64, GSO: true, MaxSegments: netio.MaxGSOSegments, MaxGSOBytes: 65535 - 48}
}
func (c *discardConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

// BenchmarkUCWrite64KMTU1024Send is a sender's own work per 64 KiB WRITE at MTU 1024,
// without the kernel or a receiver: UC WRITEs (no ACKs to wait for) from one busy-poll
// device to a Conn that drops what it is given. ns/op is the post, the requester, 64
// packets' headers, payload copies and ICRCs, and the GSO runs' layout.
func BenchmarkUCWrite64KMTU1024Send(b *testing.B) {
	const size, depth = 64 << 10, 64
	dc := &discardConn{local: netip.MustParseAddrPort("127.10.0.6:4791"), closed: make(chan struct{})}
	a := newHostCfg(b, verbs.SoftConfig{Addr: dc.local.Addr(), Conn: dc, BusyPoll: true})
	qp, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUC, SendCQ: a.CQ, RecvCQ: a.RCQ,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	p := defaultRC()
	p.MTU = verbs.MTU1024
	connect(b, qp, p, verbs.GIDFromAddr(netip.MustParseAddr("127.10.0.7")), 0x42, 0, 0)
	src := a.MR(b, size, allAccess)
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, size)}, RemoteAddr: 0x10000, RKey: 0x1234}
	wcs := make([]verbs.WC, 32)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		wr.Flags = 0
		if i%16 == 15 || i == b.N-1 {
			wr.Flags = verbs.SendSignaled
		}
		for inflight >= depth {
			k, err := a.CQ.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			inflight -= 16 * k
		}
		if err := qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		k, err := a.CQ.Poll(wcs)
		if err != nil {
			b.Fatal(err)
		}
		if k > 0 {
			inflight -= 16 * k
		}
	}
	b.StopTimer()
	if got, want := dc.segs.Load(), int64(b.N)*64; got < want {
		b.Fatalf("%d packets sent for %d WRITEs, want %d", got, b.N, want)
	}
}
