package engine

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// mcastMember is a UD QP on its own device, ready to receive.
type mcastMember struct {
	dev *Device
	pd  *PD
	cq  *CQ
	qp  *QP
	mr  *MR
}

const mcastQKey = 0x01234567

func newMcastMember(t *testing.T, dev *Device, init QPInit) *mcastMember {
	t.Helper()
	if dev == nil {
		dev = openUDPDevice(t)
	}
	m := &mcastMember{dev: dev}
	m.pd, _ = dev.allocPD()
	m.cq, _ = dev.newCQ(1024)
	init.Type, init.SendCQ, init.RecvCQ = driver.QPTypeUD, m.cq, m.cq
	init.Cap = driver.QPCap{MaxSendWR: 64, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}
	var err error
	if m.qp, err = dev.CreateQP(m.pd, init); err != nil {
		t.Fatal(err)
	}
	udUp(t, m.qp, mcastQKey)
	if m.mr, err = m.pd.regMR(make([]byte, 256*(grhLen+64)), driver.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 256 {
		sge := driver.SGE{Addr: m.mr.Addr() + uint64(i*(grhLen+64)), Length: grhLen + 64, LKey: m.mr.LKey()}
		must(t, m.qp.PostRecv([]driver.RecvWR{{ID: uint64(i), SGL: []driver.SGE{sge}}}))
	}
	return m
}

// received polls the member's CQ for receive completions until n have come or wait
// has passed, and returns the first byte of each message (its number).
func (m *mcastMember) received(t *testing.T, n int, wait time.Duration) []byte {
	t.Helper()
	var got []byte
	wcs := make([]driver.WC, 16)
	deadline := time.Now().Add(wait)
	for len(got) < n && time.Now().Before(deadline) {
		k, err := m.cq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Opcode != driver.WCRecv {
				continue
			}
			if wc.Status != driver.WCSuccess || wc.Flags&driver.WCWithGRH == 0 {
				t.Fatalf("receive completion %+v", wc)
			}
			buf := m.mr.Buf()[int(wc.ID)*(grhLen+64):]
			got = append(got, buf[grhLen])
		}
		if k == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return got
}

// mcastSend posts count UD SENDs numbered from first to the group, with qkey.
func mcastSend(t *testing.T, m *mcastMember, gid [16]byte, first, count int, qkey uint32) {
	t.Helper()
	ah := &AH{DGID: gid, HopLimit: 64}
	src, _ := m.pd.regMR(make([]byte, 64*count), driver.AccessLocalWrite)
	for i := range count {
		src.Buf()[i*64] = byte(first + i)
		wr := driver.SendWR{ID: uint64(i), Opcode: driver.WRSend, SGL: []driver.SGE{{Addr: src.Addr() + uint64(i*64), Length: 64, LKey: src.LKey()}},
			AH: ah, RemoteQPN: McastQPN, RemoteQKey: qkey}
		must(t, m.qp.PostSend([]driver.SendWR{wr}))
	}
}

// Every QP attached to a group gets every message sent to it, over real IP multicast on
// loopback, two of them on one device; the ICRC verifies for the group's address with
// the Identification goverbs sends (nothing recovered); the GRH names the group; a
// sender not attached hears nothing; a detached QP hears nothing more while the other
// members still do; a wrong Q_Key is dropped and counted per member.
func TestMcastDelivery(t *testing.T) {
	group := testaddr.Group(testaddr.Engine)
	gid := AddrToGID(group)
	sender := newMcastMember(t, nil, QPInit{})
	r1 := newMcastMember(t, nil, QPInit{})
	r2 := newMcastMember(t, nil, QPInit{})
	r3 := newMcastMember(t, r2.dev, QPInit{}) // a second QP on r2's device
	for _, m := range []*mcastMember{r1, r2, r3} {
		must(t, m.qp.AttachMcast(gid, 0))
	}
	must(t, r1.qp.AttachMcast(gid, 0)) // twice: no error, one copy

	const n = 20
	mcastSend(t, sender, gid, 0, n, mcastQKey)
	for i, m := range []*mcastMember{r1, r2, r3} {
		got := m.received(t, n, 5*time.Second)
		if len(got) != n {
			t.Fatalf("member %d got %d of %d messages", i+1, len(got), n)
		}
		seen := map[byte]bool{}
		for _, b := range got {
			seen[b] = true
		}
		if len(seen) != n {
			t.Fatalf("member %d got %v, want each of 0..%d once", i+1, got, n-1)
		}
		if more := m.received(t, 1, 50*time.Millisecond); len(more) != 0 {
			t.Fatalf("member %d got extra copies %v", i+1, more)
		}
	}
	grh := r1.mr.Buf()[:grhLen]
	if dst := netip.AddrFrom4([4]byte(grh[36:40])); dst != group {
		t.Errorf("GRH destination %v, want the group %v", dst, group)
	}
	for _, d := range []*Device{r1.dev, r2.dev} {
		c := &d.counters
		if c.ICRCRecovered.Load() != 0 || c.ICRCErrors.Load() != 0 || c.NoQP.Load() != 0 {
			t.Errorf("%s: icrc recovered %d, errors %d, no QP %d", d.Name(), c.ICRCRecovered.Load(), c.ICRCErrors.Load(), c.NoQP.Load())
		}
	}
	if got := r2.dev.counters.McastPackets.Load(); got != n {
		t.Errorf("r2's device counted %d multicast packets, want %d (one per packet, not per QP)", got, n)
	}
	if got := sender.received(t, 1, 50*time.Millisecond); len(got) != 0 {
		t.Errorf("the sender, not attached, received %v", got)
	}

	must(t, r1.qp.DetachMcast(gid, 0))
	if err := r1.qp.DetachMcast(gid, 0); !errors.Is(err, driver.ErrInvalidAttr) {
		t.Errorf("second detach: %v, want ErrInvalidAttr", err)
	}
	mcastSend(t, sender, gid, 100, 5, mcastQKey)
	if got := r2.received(t, 5, 5*time.Second); len(got) != 5 {
		t.Fatalf("after r1 detached, r2 got %v", got)
	}
	if got := r3.received(t, 5, 5*time.Second); len(got) != 5 {
		t.Fatalf("after r1 detached, r3 got %v", got)
	}
	if got := r1.received(t, 1, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("detached r1 got %v", got)
	}

	before := r2.dev.counters.BadQKey.Load()
	mcastSend(t, sender, gid, 200, 3, mcastQKey+1)
	deadline := time.Now().Add(5 * time.Second)
	for r2.dev.counters.BadQKey.Load() < before+6 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := r2.dev.counters.BadQKey.Load() - before; got != 6 {
		t.Errorf("bad_qkey_drop grew by %d, want 6 (3 packets, 2 members)", got)
	}
	if got := r2.received(t, 1, 50*time.Millisecond); len(got) != 0 {
		t.Errorf("a wrong Q_Key was delivered: %v", got)
	}
}

// A member hears its own sends, as a multicast-loopback HCA delivers them, unless it was
// created with BlockSelfMcastLoopback; another QP of the same device hears them either way.
func TestMcastSelfLoopback(t *testing.T) {
	gid := AddrToGID(testaddr.Group(testaddr.Engine))
	loud := newMcastMember(t, nil, QPInit{})
	quiet := newMcastMember(t, loud.dev, QPInit{BlockSelfMcastLoopback: true})
	must(t, loud.qp.AttachMcast(gid, 0))
	must(t, quiet.qp.AttachMcast(gid, 0))
	mcastSend(t, loud, gid, 1, 3, mcastQKey)
	mcastSend(t, quiet, gid, 10, 3, mcastQKey)
	if got := loud.received(t, 6, 5*time.Second); len(got) != 6 {
		t.Errorf("the looping member got %v, want its own 3 and the other's 3", got)
	}
	if got := quiet.received(t, 3, 5*time.Second); len(got) != 3 || got[0] != 1 {
		t.Errorf("the blocking member got %v, want only the other's 3", got)
	}
	if got := quiet.received(t, 1, 100*time.Millisecond); len(got) != 0 {
		t.Errorf("the blocking member heard itself: %v", got)
	}
}

// What AttachMcast refuses, and that closing a QP detaches it (the group is left when
// the last member goes).
func TestMcastAttachRules(t *testing.T) {
	dev := openUDPDevice(t)
	pd, _ := dev.allocPD()
	cq, _ := dev.newCQ(16)
	rc, err := dev.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	group := AddrToGID(testaddr.Group(testaddr.Engine))
	if err := rc.AttachMcast(group, 0); !errors.Is(err, driver.ErrInvalidAttr) {
		t.Errorf("RC attach: %v", err)
	}
	m := newMcastMember(t, dev, QPInit{})
	for _, g := range []string{"127.0.0.1", "::ffff:10.0.0.1", "ff0e::1"} {
		if err := m.qp.AttachMcast(AddrToGID(netip.MustParseAddr(g)), 0); !errors.Is(err, driver.ErrInvalidAttr) {
			t.Errorf("attach to %s: %v", g, err)
		}
	}
	must(t, m.qp.AttachMcast(group, 0))
	if n := len(dev.mcast.groups); n != 1 {
		t.Fatalf("%d groups joined", n)
	}
	must(t, m.qp.Close())
	if n := len(dev.mcast.groups); n != 0 {
		t.Fatalf("after the only member closed: %d groups", n)
	}
	if err := m.qp.AttachMcast(group, 0); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("attach after close: %v", err)
	}
}

// Hostile datagrams sent to a joined group are dropped and counted under the reason,
// and the members stay usable: truncated, a bad ICRC, an RC opcode, a UD SEND to a QPN
// other than 0xFFFFFF, a bad P_Key.
func TestMcastHostile(t *testing.T) {
	group := testaddr.Group(testaddr.Engine)
	m := newMcastMember(t, nil, QPInit{})
	must(t, m.qp.AttachMcast(AddrToGID(group), 0))
	evil, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(testaddr.Addr(testaddr.Engine), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	from := evil.LocalAddr().(*net.UDPAddr).AddrPort()
	to := netip.AddrPortFrom(group, wire.UDPPort)
	packet := func(op wire.Opcode, pkey uint16, qpn uint32, goodICRC bool) []byte {
		b := make([]byte, wire.BTHLen+wire.DETHLen+8+wire.ICRCLen)
		wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, PKey: pkey, DestQP: qpn})
		wire.DETH(b[wire.BTHLen:]).Encode(&wire.DETHFields{QKey: mcastQKey, SrcQP: 0x42})
		n := len(b) - wire.ICRCLen
		ip := wire.IPHeader{Src: from.Addr(), Dst: group, SrcPort: from.Port(), DstPort: wire.UDPPort, DF: true}
		wire.PutICRC(&ip, b, n)
		if !goodICRC {
			binary.LittleEndian.PutUint32(b[n:], ^binary.LittleEndian.Uint32(b[n:]))
		}
		return b
	}
	c := &m.dev.counters
	cases := []struct {
		name    string
		b       []byte
		counter func() uint64
	}{
		{"truncated", packet(wire.UDSendOnly, 0xffff, McastQPN, true)[:10], c.Malformed.Load},
		{"bad ICRC", packet(wire.UDSendOnly, 0xffff, McastQPN, false), c.ICRCErrors.Load},
		{"RC opcode", packet(wire.RCSendOnly, 0xffff, McastQPN, true), c.BadTransport.Load},
		{"unicast QPN", packet(wire.UDSendOnly, 0xffff, m.qp.QPN(), true), c.NoQP.Load},
		{"bad P_Key", packet(wire.UDSendOnly, 0x1234, McastQPN, true), c.BadPKey.Load},
	}
	for _, tc := range cases {
		before := tc.counter()
		if _, err := evil.WriteToUDPAddrPort(tc.b, to); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for tc.counter() == before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if tc.counter() != before+1 {
			t.Errorf("%s: counter went from %d to %d", tc.name, before, tc.counter())
		}
	}
	if got := m.received(t, 1, 50*time.Millisecond); len(got) != 0 {
		t.Fatalf("a hostile packet was delivered: %v", got)
	}
	// The same datagram done right is delivered.
	if _, err := evil.WriteToUDPAddrPort(packet(wire.UDSendOnly, 0xffff, McastQPN, true), to); err != nil {
		t.Fatal(err)
	}
	if got := m.received(t, 1, 5*time.Second); len(got) != 1 {
		t.Fatalf("the well-formed packet was not delivered")
	}
}
