package engine_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// The access matrix (issue 6): every forbidden remote access, each with the outcome the
// spec gives it on both sides — the requester's completion status (or, for a hand-built
// request, the NAK on the wire), the responder QP's state and counters — and with the
// target memory checked byte for byte, together with guard zones around it, the
// requester's own landing buffer, and (for cases a packet check drops) a control packet
// that differs only in the faulty field and does land. Cases rc_errors_test.go already
// has (WRITE with a wrong rkey, WRITE past the end, READ without REMOTE_READ on the MR,
// WRITE to a deregistered MR, WRITE to a QP without REMOTE_WRITE, misaligned
// FETCH_AND_ADD) are not repeated.

const guardLen = 256

// guarded is a memory region registered in the middle of a larger buffer: guard zones
// on both sides that no remote access may reach, and a snapshot to compare against.
type guarded struct {
	all  []byte
	mr   *verbs.MR
	want []byte
}

func newGuarded(t testing.TB, pd *verbs.PD, size int, access verbs.Access, seed uint64) *guarded {
	t.Helper()
	all := make([]byte, guardLen+size+guardLen) // 8-aligned: heap objects of this size are
	fill(all, seed)
	mr, err := pd.RegMR(all[guardLen:guardLen+size], access)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr()%8 != 0 {
		t.Fatalf("region at %#x is not 8-byte aligned", mr.Addr())
	}
	return &guarded{all: all, mr: mr, want: bytes.Clone(all)}
}

// unchanged fails the test if any byte of the region or its guards changed.
func (g *guarded) unchanged(t testing.TB, what string) {
	t.Helper()
	if i := firstDiff(g.all, g.want); i >= 0 {
		where := "region"
		switch {
		case i < guardLen:
			where = "lower guard"
		case i >= len(g.all)-guardLen:
			where = "upper guard"
		}
		t.Fatalf("%s: %s byte %d (region offset %d) changed from %#x to %#x", what, where, i, i-guardLen, g.want[i], g.all[i])
	}
}

// accept records the current contents as expected (after a permitted access).
func (g *guarded) accept() { copy(g.want, g.all) }

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func waitCounter(t testing.TB, d *verbs.Device, name string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for d.Counters().Get(name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", name, d.Counters().Get(name), want)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// accessCase is one forbidden request made by a real requester.
type accessCase struct {
	name   string
	access verbs.Access // the target MR's rights (allAccess if zero)
	qpAcc  verbs.Access // the responder QP's access flags (allAccess if zero)
	size   int          // the target MR's size (4096 if zero)
	// wr builds the request against the target region t (and the second PD's region o).
	wr func(t, o *verbs.MR, local *verbs.MR) verbs.SendWR
	// before runs before posting (deregistering the target, say).
	before func(t *testing.T, target *guarded)
	// status is the requester's completion status; nak the NAK code behind it.
	status verbs.WCStatus
	nak    wire.NAKCode
	// accessErr: the responder counts the refusal under remote_access_err.
	accessErr bool
}

func write(n int, va func(*verbs.MR) uint64, rkey func(*verbs.MR) uint32) func(t, o, l *verbs.MR) verbs.SendWR {
	return func(t, o, l *verbs.MR) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{l.SGE(0, n)}, RemoteAddr: va(t), RKey: rkey(t)}
	}
}

func read(n int, va func(*verbs.MR) uint64, rkey func(*verbs.MR) uint32) func(t, o, l *verbs.MR) verbs.SendWR {
	return func(t, o, l *verbs.MR) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{l.SGE(0, n)}, RemoteAddr: va(t), RKey: rkey(t)}
	}
}

func fetchAdd(va func(*verbs.MR) uint64, rkey func(*verbs.MR) uint32) func(t, o, l *verbs.MR) verbs.SendWR {
	return func(t, o, l *verbs.MR) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{l.SGE(0, 8)}, RemoteAddr: va(t), RKey: rkey(t), CompareAdd: 1}
	}
}

func cmpSwap(va func(*verbs.MR) uint64, rkey func(*verbs.MR) uint32) func(t, o, l *verbs.MR) verbs.SendWR {
	return func(t, o, l *verbs.MR) verbs.SendWR {
		// Compare with what is there, so that a wrongly executed swap would change memory.
		return verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{l.SGE(0, 8)}, RemoteAddr: va(t), RKey: rkey(t),
			CompareAdd: 0, Swap: 0xdeadbeef}
	}
}

var (
	atStart  = func(m *verbs.MR) uint64 { return m.Addr() }
	rightKey = func(m *verbs.MR) uint32 { return m.RKey() }
	at       = func(off int64) func(*verbs.MR) uint64 {
		return func(m *verbs.MR) uint64 { return m.Addr() + uint64(off) }
	}
	atEnd = func(off int64) func(*verbs.MR) uint64 {
		return func(m *verbs.MR) uint64 { return m.Addr() + uint64(m.Len()) + uint64(off) }
	}
	absolute = func(va uint64) func(*verbs.MR) uint64 { return func(*verbs.MR) uint64 { return va } }
)

func TestAccessMatrix(t *testing.T) {
	wrongIndex := func(m *verbs.MR) uint32 { return m.RKey() ^ 0x100 }                                 // another key-table slot
	staleKey := func(m *verbs.MR) uint32 { return m.RKey() ^ 0x01 }                                    // right slot, wrong key byte
	otherPD := func(t, o, l *verbs.MR) verbs.SendWR { return write(64, atStart, rightKey)(o, nil, l) } // o's own key and address
	otherPDRead := func(t, o, l *verbs.MR) verbs.SendWR { return read(64, atStart, rightKey)(o, nil, l) }
	otherPDAtomic := func(t, o, l *verbs.MR) verbs.SendWR { return fetchAdd(atStart, rightKey)(o, nil, l) }
	dereg := func(t *testing.T, g *guarded) {
		if err := g.mr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	rae, inv := verbs.WCRemAccessErr, verbs.WCRemInvReqErr
	cases := []accessCase{
		{name: "READ with a wrong rkey", wr: read(64, atStart, wrongIndex), status: rae, accessErr: true},
		{name: "FETCH_AND_ADD with a wrong rkey", wr: fetchAdd(atStart, wrongIndex), status: rae, accessErr: true},
		{name: "CMP_AND_SWP with a wrong rkey", wr: cmpSwap(atStart, wrongIndex), status: rae, accessErr: true},
		{name: "WRITE with a stale key byte", wr: write(64, atStart, staleKey), status: rae, accessErr: true},
		{name: "READ with a stale key byte", wr: read(64, atStart, staleKey), status: rae, accessErr: true},

		{name: "WRITE to an MR of another PD", wr: otherPD, status: rae, accessErr: true},
		{name: "READ from an MR of another PD", wr: otherPDRead, status: rae, accessErr: true},
		{name: "atomic on an MR of another PD", wr: otherPDAtomic, status: rae, accessErr: true},

		{name: "WRITE one byte below the region", wr: write(64, at(-1), rightKey), status: rae, accessErr: true},
		{name: "WRITE ending exactly at the region's start", wr: write(64, at(-64), rightKey), status: rae, accessErr: true},
		{name: "READ below the region", wr: read(64, at(-64), rightKey), status: rae, accessErr: true},
		{name: "atomic below the region", wr: fetchAdd(at(-8), rightKey), status: rae, accessErr: true},

		{name: "WRITE starting at the region's end", wr: write(8, atEnd(0), rightKey), status: rae, accessErr: true},
		{name: "READ above the region", wr: read(64, atEnd(64), rightKey), status: rae, accessErr: true},
		{name: "atomic at the region's end", wr: fetchAdd(atEnd(0), rightKey), status: rae, accessErr: true},

		{name: "READ straddling the region's end", wr: read(64, atEnd(-32), rightKey), status: rae, accessErr: true},
		{name: "WRITE one byte too long", wr: write(4097, atStart, rightKey), status: rae, accessErr: true},
		{name: "atomic straddling the region's end", size: 4092, wr: fetchAdd(atEnd(-4), rightKey), status: rae, accessErr: true},

		// VA + length wraps past 2^64: the bounds check must not wrap with it.
		{name: "WRITE whose VA+len wraps 2^64", wr: write(64, absolute(^uint64(0)-15), rightKey), status: rae, accessErr: true},
		{name: "READ whose VA+len wraps 2^64", wr: read(4096, absolute(^uint64(0)-4095+64), rightKey), status: rae, accessErr: true},

		{name: "WRITE to an MR without REMOTE_WRITE", access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
			wr: write(64, atStart, rightKey), status: rae, accessErr: true},
		{name: "atomic on an MR without REMOTE_ATOMIC", access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite,
			wr: fetchAdd(atStart, rightKey), status: rae, accessErr: true},
		{name: "CMP_AND_SWP on a read-only MR", access: verbs.AccessRemoteRead,
			wr: cmpSwap(atStart, rightKey), status: rae, accessErr: true},

		// The QP's own access flags (IBTA 9.7.4.1.3; rxe answers Invalid Request).
		{name: "READ from a QP without REMOTE_READ", qpAcc: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic,
			wr: read(64, atStart, rightKey), status: inv, nak: wire.NAKInvalidRequest},
		{name: "atomic to a QP without REMOTE_ATOMIC", qpAcc: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
			wr: fetchAdd(atStart, rightKey), status: inv, nak: wire.NAKInvalidRequest},

		{name: "READ from a deregistered MR", before: dereg, wr: read(64, atStart, rightKey), status: rae, accessErr: true},
		{name: "atomic on a deregistered MR", before: dereg, wr: fetchAdd(atStart, rightKey), status: rae, accessErr: true},

		{name: "misaligned CMP_AND_SWP", wr: cmpSwap(at(4), rightKey), status: inv, nak: wire.NAKInvalidRequest},
		{name: "misaligned FETCH_AND_ADD by one byte", wr: fetchAdd(at(1), rightKey), status: inv, nak: wire.NAKInvalidRequest},
	}
	a, b := newHost(t), newHost(t)
	pd2, err := b.Dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.nak == 0 && c.status == verbs.WCRemAccessErr {
				c.nak = wire.NAKRemoteAccessError
			}
			params := defaultRC()
			p := newPair(t, a, b, verbs.QPTypeRC, params)
			defer p.QA.Close()
			defer p.QB.Close()
			if c.qpAcc != 0 {
				// Take the responder's QP back and bring it up again with fewer rights.
				for _, s := range []verbs.QPState{verbs.QPStateErr, verbs.QPStateReset} {
					if err := p.QB.Modify(&verbs.QPAttr{State: s}, verbs.QPAttrState); err != nil {
						t.Fatal(err)
					}
				}
				params.Access = c.qpAcc
				connect(t, p.QB, params, a.GID, p.QA.QPN(), 0xabc000, 0x100)
			}
			acc, size := c.access, c.size
			if acc == 0 {
				acc = allAccess
			}
			if size == 0 {
				size = 4096
			}
			target := newGuarded(t, b.PD, size, acc, uint64(i)+1)
			defer target.mr.Close()
			other := newGuarded(t, pd2, 4096, allAccess, uint64(i)+100)
			defer other.mr.Close()
			local := newGuarded(t, a.PD, 8192, allAccess, uint64(i)+200)
			defer local.mr.Close()
			if c.before != nil {
				c.before(t, target)
			}
			before := b.Dev.Counters().Get("remote_access_err")
			wr := c.wr(target.mr, other.mr, local.mr)
			wr.ID, wr.Flags = 1, verbs.SendSignaled
			if err := p.QA.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			// Work behind the failing request is flushed.
			if err := p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.mr.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
			wc := expectStatus(t, a.CQ, 1, c.status)
			if got := wire.Syndrome(wc.VendorErr); got != wire.NAKSyndrome(c.nak) {
				t.Errorf("completion carries syndrome %v, want %v", got, wire.NAKSyndrome(c.nak))
			}
			expectStatus(t, a.CQ, 2, verbs.WCWRFlushErr)
			waitState(t, p.QA, verbs.QPStateErr)
			// A class C responder error moves the responder's QP to the error state too
			// (IBTA 9.9.3.1.2); the NAK is sent first.
			waitState(t, p.QB, verbs.QPStateErr)
			if c.accessErr {
				waitCounter(t, b.Dev, "remote_access_err", before+1)
			}
			target.unchanged(t, "target")
			other.unchanged(t, "region in the other PD")
			local.unchanged(t, "requester's landing buffer")
		})
	}
}

// TestAccessZeroLength checks the other side of C9-88: a zero-length WRITE or READ checks
// no key at all and succeeds without touching memory, whatever its rkey and address.
func TestAccessZeroLength(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	target := newGuarded(t, b.PD, 4096, allAccess, 1)
	local := newGuarded(t, a.PD, 64, allAccess, 2)
	p.QA.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: 8, RKey: 0xdead01},
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, RemoteAddr: ^uint64(0), RKey: target.mr.RKey() ^ 0x100},
		verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.mr.SGE(0, 0)}, RemoteAddr: target.mr.AddrOf(4096), RKey: target.mr.RKey()},
	)
	for id := uint64(1); id <= 3; id++ {
		expectStatus(t, a.CQ, id, verbs.WCSuccess)
	}
	if p.QB.State() != verbs.QPStateRTS {
		t.Fatalf("responder in %v", p.QB.State())
	}
	target.unchanged(t, "target")
	local.unchanged(t, "local")
}

// rawPeer is a hand-built RC requester on its own address: a netio UDP socket (DF set,
// IPv4 Identification 0, so the device verifies its ICRC strictly) that sends packets
// encoded with package wire and collects what the device answers.
type rawPeer struct {
	t    testing.TB
	conn netio.Conn
	dst  netip.AddrPort
	in   chan []byte
}

// newRawPeer opens a raw peer on port of an address no other process holds, sending to
// dst's RoCEv2 port.
func newRawPeer(t testing.TB, port uint16, dst netip.Addr) *rawPeer {
	t.Helper()
	c := testaddr.Open(t, testaddr.Engine, func(a netip.Addr) (netio.Conn, error) {
		return netio.ListenUDP(netip.AddrPortFrom(a, port), netio.UDPOptions{DisableGSO: true, DisableGRO: true})
	})
	r := &rawPeer{t: t, conn: c, dst: netip.AddrPortFrom(dst, wire.UDPPort), in: make(chan []byte, 1024)}
	go func() {
		msgs := make([]netio.Message, 8)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 9000)
		}
		for {
			n, err := c.ReadBatch(msgs)
			if err != nil {
				close(r.in)
				return
			}
			for _, m := range msgs[:n] {
				select {
				case r.in <- bytes.Clone(m.Buf[:m.N]):
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { c.Close() })
	return r
}

// send encodes h and payload, seals the ICRC for the IP header the packet really travels
// in (this socket's address and port to the device), and sends it.
func (r *rawPeer) send(h wire.Headers, payload []byte) {
	r.t.Helper()
	pkt := make([]byte, h.Len()+len(payload)+8)
	hl := h.Encode(pkt)
	copy(pkt[hl:], payload)
	n := wire.Finish(pkt, hl, len(payload))
	src := r.conn.SourceAddr()
	ip := wire.IPHeader{Src: src.Addr(), Dst: r.dst.Addr(), SrcPort: src.Port(), DstPort: r.dst.Port(), DF: true}
	wire.PutICRC(&ip, pkt, n)
	msgs := []netio.Message{{Buf: pkt, N: n + wire.ICRCLen, Addr: r.dst}}
	if _, err := r.conn.WriteBatch(msgs); err != nil {
		r.t.Fatal(err)
	}
}

// expect waits for the next packet from the device and returns it parsed.
func (r *rawPeer) expect(within time.Duration) *wire.Packet {
	r.t.Helper()
	select {
	case b, ok := <-r.in:
		if !ok {
			r.t.Fatal("peer socket closed")
		}
		p := new(wire.Packet)
		if err := p.Parse(b, 0); err != nil {
			r.t.Fatalf("device sent an unparsable packet: %v", err)
		}
		return p
	case <-time.After(within):
		r.t.Fatalf("no answer within %v", within)
	}
	return nil
}

// quiet checks that the device answers nothing for a while.
func (r *rawPeer) quiet(d time.Duration) {
	r.t.Helper()
	select {
	case b := <-r.in:
		r.t.Fatalf("device answered % x", b[:min(len(b), 32)])
	case <-time.After(d):
	}
}

// rawRig is a responder QP on host b connected to the raw peer.
type rawRig struct {
	b      *host
	peer   *rawPeer
	qp     *verbs.QP
	target *guarded
	psn    wire.PSN
}

const fakePeerQPN = 0x777

func newRawRig(t *testing.T, b *host, peer *rawPeer, state verbs.QPState) *rawRig {
	t.Helper()
	qp := b.QP(t, verbs.QPTypeRC)
	t.Cleanup(func() { qp.Close() })
	r := &rawRig{b: b, peer: peer, qp: qp, target: newGuarded(t, b.PD, 4096, allAccess, 7), psn: 0x1000}
	t.Cleanup(func() { r.target.mr.Close() })
	peerGID := verbs.GIDFromAddr(peer.conn.LocalAddr().Addr())
	switch state {
	case verbs.QPStateReset:
	case verbs.QPStateInit:
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: allAccess},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
	default:
		connect(t, qp, defaultRC(), peerGID, fakePeerQPN, uint32(r.psn), 0x2000)
	}
	return r
}

// writeOnly is an RDMA WRITE ONLY of payload to offset off of the target.
func (r *rawRig) writeOnly(off int, payload []byte) wire.Headers {
	return wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.RCWriteOnly, PKey: 0xffff, DestQP: r.qp.QPN(), PSN: r.psn, AckReq: true},
		RETH: wire.RETHFields{VA: r.target.mr.AddrOf(off), RKey: r.target.mr.RKey(), DMALen: uint32(len(payload))},
	}
}

// control sends h (a corrected copy of a dropped packet) and checks that it lands and is
// acknowledged: the dropped one would have succeeded but for the faulty field.
func (r *rawRig) control(t *testing.T, h wire.Headers, off int, payload []byte) {
	t.Helper()
	r.peer.send(h, payload)
	ack := r.peer.expect(5 * time.Second)
	if ack.BTH.Opcode() != wire.RCAck || ack.AETH.Syndrome().Type() != wire.AckTypeACK || ack.BTH.PSN() != r.psn {
		t.Fatalf("control packet answered with %v syndrome %v PSN %#x", ack.BTH.Opcode(), ack.AETH.Syndrome(), uint32(ack.BTH.PSN()))
	}
	// The ACK came over a plain socket, which the race detector does not see as ordering;
	// the QP's lock, held while the WRITE landed, does.
	r.qp.State()
	if !bytes.Equal(r.target.mr.Buf()[off:off+len(payload)], payload) {
		t.Fatal("control WRITE did not land")
	}
	copy(r.target.want[guardLen+off:], payload)
	r.target.unchanged(t, "after the control WRITE")
	r.psn = r.psn.Add(1)
}

// TestAccessHandBuilt covers what a well-behaved requester cannot send: RETH lengths past
// the port's max_msg_sz, VA+len wrapping with the right key, a wrong P_Key, a wrong
// destination QPN, a source address that is not the QP's peer, and requests to a QP that
// is not yet in RTR.
func TestAccessHandBuilt(t *testing.T) {
	b := newHost(t)
	peer := newRawPeer(t, wire.UDPPort, b.GID.Addr())
	payload := []byte("sixteen bytes!!!")
	counter := func(name string) uint64 { return b.Dev.Counters().Get(name) }

	// Requests the responder refuses with a NAK, moving its QP to the error state. A DMA
	// length beyond the port's max_msg_sz (8 MiB) is an Invalid Request whatever the key
	// (the engine checks it first, as rxe checks the length against max_msg_sz); within
	// it, a range the key does not cover is a Remote Access Error.
	naks := []struct {
		name string
		h    func(r *rawRig) (wire.Headers, []byte)
		code wire.NAKCode
	}{
		{"WRITE ONLY with DMALen 2^32-1", func(r *rawRig) (wire.Headers, []byte) {
			h := r.writeOnly(0, payload)
			h.RETH.DMALen = ^uint32(0)
			return h, payload
		}, wire.NAKInvalidRequest},
		{"WRITE FIRST with DMALen 2^31", func(r *rawRig) (wire.Headers, []byte) {
			h := r.writeOnly(0, nil)
			h.BTH.Opcode, h.BTH.AckReq = wire.RCWriteFirst, false
			h.RETH.DMALen = 1 << 31
			return h, make([]byte, 1024) // exactly one path MTU, so only the length is wrong
		}, wire.NAKInvalidRequest},
		{"READ with DMALen 2^32-1", func(r *rawRig) (wire.Headers, []byte) {
			h := r.writeOnly(0, nil)
			h.BTH.Opcode = wire.RCReadRequest
			h.RETH.DMALen = ^uint32(0)
			return h, nil
		}, wire.NAKInvalidRequest},
		{"READ one byte past the region within max_msg_sz", func(r *rawRig) (wire.Headers, []byte) {
			h := r.writeOnly(0, nil)
			h.BTH.Opcode = wire.RCReadRequest
			h.RETH.DMALen = 4097
			return h, nil
		}, wire.NAKRemoteAccessError},
		{"WRITE whose VA+DMALen wraps 2^64, right key", func(r *rawRig) (wire.Headers, []byte) {
			h := r.writeOnly(0, payload)
			h.RETH.VA = ^uint64(0) - 7
			return h, payload
		}, wire.NAKRemoteAccessError},
		{"READ whose VA+DMALen wraps 2^64, right key", func(r *rawRig) (wire.Headers, []byte) {
			h := r.writeOnly(0, nil)
			h.BTH.Opcode = wire.RCReadRequest
			h.RETH.VA, h.RETH.DMALen = ^uint64(0)-1000, 4096
			return h, nil
		}, wire.NAKRemoteAccessError},
		{"FETCH_AND_ADD at VA 2^64-8, right key", func(r *rawRig) (wire.Headers, []byte) {
			h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.RCFetchAdd, PKey: 0xffff, DestQP: r.qp.QPN(), PSN: r.psn, AckReq: true},
				AtomicETH: wire.AtomicETHFields{VA: ^uint64(0) - 7, RKey: r.target.mr.RKey(), SwapAdd: 1}}
			return h, nil
		}, wire.NAKRemoteAccessError},
	}
	for _, c := range naks {
		t.Run(c.name, func(t *testing.T) {
			r := newRawRig(t, b, peer, verbs.QPStateRTS)
			h, pl := c.h(r)
			r.peer.send(h, pl)
			nak := r.peer.expect(5 * time.Second)
			if nak.BTH.Opcode() != wire.RCAck || nak.AETH.Syndrome() != wire.NAKSyndrome(c.code) || nak.BTH.PSN() != r.psn {
				t.Fatalf("answered %v syndrome %v PSN %#x, want NAK %v at %#x", nak.BTH.Opcode(), nak.AETH.Syndrome(),
					uint32(nak.BTH.PSN()), wire.NAKSyndrome(c.code), uint32(r.psn))
			}
			if nak.BTH.DestQP() != fakePeerQPN {
				t.Errorf("NAK sent to QPN %#x", nak.BTH.DestQP())
			}
			waitState(t, r.qp, verbs.QPStateErr)
			r.target.unchanged(t, "target")
			r.peer.quiet(20 * time.Millisecond)
		})
	}

	// Packets the receive checks drop silently (IBTA 9.6): no answer, nothing written,
	// the QP stays as it was, the drop is counted under its reason, and the same packet
	// with the field corrected then lands.
	drops := []struct {
		name      string
		state     verbs.QPState
		elsewhere bool // sent from another address than the QP's peer
		counter   string
		mangle    func(r *rawRig, h *wire.Headers)
	}{
		{name: "wrong P_Key", state: verbs.QPStateRTS, counter: "bad_pkey_drop", mangle: func(r *rawRig, h *wire.Headers) { h.BTH.PKey = 0x1234 }},
		{name: "P_Key 0 (invalid)", state: verbs.QPStateRTS, counter: "bad_pkey_drop", mangle: func(r *rawRig, h *wire.Headers) { h.BTH.PKey = 0 }},
		{name: "wrong destination QPN", state: verbs.QPStateRTS, counter: "no_qp_drop", mangle: func(r *rawRig, h *wire.Headers) { h.BTH.DestQP = r.qp.QPN() + 0x1000 }},
		{name: "destination QPN 0", state: verbs.QPStateRTS, counter: "no_qp_drop", mangle: func(r *rawRig, h *wire.Headers) { h.BTH.DestQP = 0 }},
		{name: "source address not the QP's peer", state: verbs.QPStateRTS, elsewhere: true, counter: "bad_address_drop"},
		{name: "UC opcode to an RC QP", state: verbs.QPStateRTS, counter: "bad_transport_drop", mangle: func(r *rawRig, h *wire.Headers) { h.BTH.Opcode = wire.UCWriteOnly }},
		{name: "QP in INIT", state: verbs.QPStateInit, counter: "bad_qp_state_drop"},
		{name: "QP in RESET", state: verbs.QPStateReset, counter: "bad_qp_state_drop"},
	}
	for _, c := range drops {
		t.Run(c.name, func(t *testing.T) {
			state := c.state
			r := newRawRig(t, b, peer, state)
			h := r.writeOnly(64, payload)
			if c.mangle != nil {
				c.mangle(r, &h)
			}
			from := r.peer
			if c.elsewhere {
				from = newRawPeer(t, 0, b.GID.Addr())
			}
			before := counter(c.counter)
			c0 := b.Dev.Counters()
			defer func() {
				if t.Failed() { // say where the packet went instead
					for i, x := range b.Dev.Counters() {
						if x.Value != c0[i].Value {
							t.Logf("%s: %d -> %d", x.Name, c0[i].Value, x.Value)
						}
					}
				}
			}()
			from.send(h, payload)
			waitCounter(t, b.Dev, c.counter, before+1)
			r.peer.quiet(20 * time.Millisecond)
			r.target.unchanged(t, "target")
			if got := r.qp.State(); got != state {
				t.Fatalf("QP moved from %v to %v", state, got)
			}
			if state != verbs.QPStateRTS {
				// Bring it up; the request sent early must have left no trace.
				if state == verbs.QPStateReset {
					if err := r.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: allAccess},
						verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
						t.Fatal(err)
					}
				}
				p := defaultRC()
				rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: p.MTU, DestQPN: fakePeerQPN, RQPSN: uint32(r.psn),
					MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(r.peer.conn.LocalAddr().Addr()), Port: 1}}
				if err := r.qp.Modify(rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
					verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
					t.Fatal(err)
				}
			}
			r.control(t, r.writeOnly(64, payload), 64, payload)
		})
	}
}

// TestAccessUDWrongQKey: a UD datagram with the wrong Q_Key is dropped silently (IBTA
// 10.2.5, C10-15) and counted; the requester completes successfully (UD is unreliable);
// the receive WQE is not consumed and its buffer is untouched. The next datagram with the
// right Q_Key lands in that same WQE.
func TestAccessUDWrongQKey(t *testing.T) {
	a, b := newHost(t), newHost(t)
	const qkey = 0x11111111
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	src := a.MR(t, 256, allAccess)
	copy(src.Buf(), "q_key")
	recvBuf := newGuarded(t, b.PD, verbs.GRHLen+256, allAccess, 3)
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{recvBuf.mr.SGE(0, recvBuf.mr.Len())}}); err != nil {
		t.Fatal(err)
	}
	for i, wrong := range []uint32{qkey ^ 1, 0, 0x7fffffff} {
		before := b.Dev.Counters().Get("bad_qkey_drop")
		if err := qa.PostSend(verbs.SendWR{ID: uint64(10 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 5)},
			AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: wrong}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, a.CQ, uint64(10+i), verbs.WCSuccess)
		waitCounter(t, b.Dev, "bad_qkey_drop", before+1)
	}
	if n, _ := b.RCQ.Poll(make([]verbs.WC, 1)); n != 0 {
		t.Fatal("a datagram with a wrong Q_Key completed")
	}
	recvBuf.unchanged(t, "receive buffer")
	qa.PostSend(verbs.SendWR{ID: 20, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 5)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey})
	expectStatus(t, a.CQ, 20, verbs.WCSuccess)
	wc := expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if wc.ByteLen != verbs.GRHLen+5 || string(recvBuf.mr.Buf()[verbs.GRHLen:verbs.GRHLen+5]) != "q_key" {
		t.Fatalf("right Q_Key: %+v %q", wc, recvBuf.mr.Buf()[verbs.GRHLen:verbs.GRHLen+5])
	}
	if qb.State() != verbs.QPStateRTS {
		t.Fatalf("UD QP in %v", qb.State())
	}
}

// TestAccessWrongDestQPNRequester is the requester's side of a wrong destination QPN:
// the responder drops every packet, so the requester's QP exhausts its retries.
func TestAccessWrongDestQPNRequester(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := defaultRC()
	p.Timeout, p.Retry = 8, 1 // ≈1 ms per try
	qa, qb := a.QP(t, verbs.QPTypeRC), b.QP(t, verbs.QPTypeRC)
	connect(t, qa, p, b.GID, qb.QPN()+0x100, 1, 2)
	connect(t, qb, p, a.GID, qa.QPN(), 2, 1)
	target := newGuarded(t, b.PD, 4096, allAccess, 9)
	src := a.MR(t, 64, allAccess)
	before := b.Dev.Counters().Get("no_qp_drop")
	qa.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64)},
		RemoteAddr: target.mr.Addr(), RKey: target.mr.RKey()})
	expectStatus(t, a.CQ, 1, verbs.WCRetryExcErr)
	// One try and one retry, both dropped (the receive loop may count the second after
	// the requester has given up on it).
	waitCounter(t, b.Dev, "no_qp_drop", before+2)
	if got := b.Dev.Counters().Get("no_qp_drop") - before; got != 2 {
		t.Errorf("no_qp_drop rose by %d, want 2", got)
	}
	target.unchanged(t, "target")
	if qb.State() != verbs.QPStateRTS {
		t.Fatalf("the QP the packets were not for is in %v", qb.State())
	}
}
