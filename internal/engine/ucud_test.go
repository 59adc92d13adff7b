package engine_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

func TestUCSendAndWrite(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeUC, defaultRC())
	src, dst := a.MR(t, 8192, allAccess), b.MR(t, 8192, allAccess)
	fill(src.Buf(), 42)
	p.QB.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 8192)}})
	if err := p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithImm, Imm: 0xfeed, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 3000)}}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 2, verbs.WCSuccess)
	wc := expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if wc.ByteLen != 3000 || wc.Flags&verbs.WCWithImm == 0 || wc.Imm != 0xfeed || !bytes.Equal(dst.Buf()[:3000], src.Buf()[:3000]) {
		t.Fatalf("UC SEND: %+v", wc)
	}
	clear(dst.Buf())
	// UC completes locally when the packets leave; WRITE with immediate gives the
	// receiver a completion to learn the data has landed.
	p.QB.PostRecv(verbs.RecvWR{ID: 5})
	if err := p.QA.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWriteWithImm, Imm: 9, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 5000)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 3, verbs.WCSuccess)
	wc = expectStatus(t, b.RCQ, 5, verbs.WCSuccess)
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Imm != 9 || wc.ByteLen != 5000 || !bytes.Equal(dst.Buf()[:5000], src.Buf()[:5000]) {
		t.Fatalf("UC WRITE_WITH_IMM: %+v", wc)
	}
	// READ and atomics are not UC operations.
	err := p.QA.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	var pe *verbs.PostError
	if !errors.As(err, &pe) {
		t.Fatalf("UC READ posted: %v", err)
	}
}

// testUD runs UD between a and b.
func testUD(t *testing.T, a, b *host) {
	const qkey = 0x11111111
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	src, dst := a.MR(t, 4096, allAccess), b.MR(t, 4096+verbs.GRHLen, allAccess)
	fill(src.Buf(), 7)
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	qb.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}})
	if err := qa.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRSendWithImm, Imm: 77, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 1000)},
		AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, a.CQ, 9, verbs.WCSuccess)
	wc := expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if wc.ByteLen != verbs.GRHLen+1000 || wc.SrcQP != qa.QPN() || wc.Flags&verbs.WCWithGRH == 0 || wc.Imm != 77 {
		t.Fatalf("UD completion %+v", wc)
	}
	if !bytes.Equal(dst.Buf()[verbs.GRHLen:verbs.GRHLen+1000], src.Buf()[:1000]) {
		t.Fatal("UD payload differs")
	}
	grh := dst.Buf()[:verbs.GRHLen]
	srcAddr := a.GID.Addr()
	if srcAddr.Is4() {
		// rxe's layout: the IPv4 header in the last 20 bytes, zeros before it.
		if !bytes.Equal(grh[:20], make([]byte, 20)) || grh[20] != 0x45 || grh[20+9] != 17 {
			t.Fatalf("GRH area % x", grh)
		}
		if got := netip.AddrFrom4([4]byte(grh[32:36])); got != srcAddr {
			t.Fatalf("GRH source %v, want %v", got, srcAddr)
		}
	} else if grh[0]>>4 != 6 || netip.AddrFrom16([16]byte(grh[8:24])) != srcAddr || grh[6] != 17 {
		t.Fatalf("GRH area % x", grh)
	}
	// Answer through an AH made from the completion, as ud_pingpong does.
	back, err := b.PD.CreateAHFromWC(&wc, grh, 1)
	if err != nil {
		t.Fatal(err)
	}
	if back.Attr().DGID != a.GID {
		t.Fatalf("AH from WC points at %v, want %v", back.Attr().DGID, a.GID)
	}
	rsrc := b.MR(t, 64, allAccess)
	rdst := a.MR(t, 64+verbs.GRHLen, allAccess)
	qa.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{rdst.SGE(0, rdst.Len())}})
	qb.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{rsrc.SGE(0, 10)}, AH: back, RemoteQPN: wc.SrcQP, RemoteQKey: qkey})
	expectStatus(t, a.RCQ, 3, verbs.WCSuccess)

	// A wrong Q_Key is dropped and counted; nothing completes.
	before := b.Dev.Counters().Get("bad_qkey_drop")
	qb.PostRecv(verbs.RecvWR{ID: 5, SGL: []verbs.SGE{dst.SGE(0, dst.Len())}})
	qa.PostSend(verbs.SendWR{ID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey + 1})
	expectStatus(t, a.CQ, 10, verbs.WCSuccess)
	deadline := time.Now().Add(5 * time.Second)
	for b.Dev.Counters().Get("bad_qkey_drop") == before {
		if time.Now().After(deadline) {
			t.Fatal("wrong Q_Key was not counted")
		}
		time.Sleep(time.Millisecond)
	}
	if n, _ := b.RCQ.Poll(make([]verbs.WC, 1)); n != 0 {
		t.Fatal("a datagram with a wrong Q_Key completed")
	}
	// A message larger than the path MTU is refused at post time.
	big := a.MR(t, 8192, allAccess)
	err = qa.PostSend(verbs.SendWR{ID: 11, Opcode: verbs.WRSend, SGL: []verbs.SGE{big.SGE(0, 8192)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey})
	if err == nil {
		t.Fatal("UD message larger than the MTU was accepted")
	}
}

func TestUDIPv4(t *testing.T) { testUD(t, newHost(t), newHost(t)) }

func TestUDIPv6(t *testing.T) { testUD(t, ipv6Host(t), ipv6Host(t)) }

// ipv6Host opens a host on an IPv6 address of its own that it adds to lo and removes
// when the test ends. ::1 is one address for the whole machine: test processes running
// at once would fight over [::1]:4791, so each host gets a random address of
// fd00:6f76:6572::/64 instead, and "File exists" (another process added the same one)
// means drawing again.
func ipv6Host(t *testing.T) *host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("adding IPv6 addresses to lo needs root")
	}
	for range 100 {
		addr := netip.AddrFrom16([16]byte{0xfd, 0, 0x6f, 0x76, 0x65, 0x72, 8: byte(rand.IntN(256)),
			byte(rand.IntN(256)), byte(rand.IntN(256)), byte(rand.IntN(256)), byte(rand.IntN(256)),
			byte(rand.IntN(256)), byte(rand.IntN(256)), byte(1 + rand.IntN(255))}).String()
		out, err := exec.Command("ip", "-6", "addr", "add", addr+"/128", "dev", "lo", "nodad").CombinedOutput()
		if err != nil {
			if bytes.Contains(out, []byte("exists")) {
				continue
			}
			t.Skipf("ip -6 addr add: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "-6", "addr", "del", addr+"/128", "dev", "lo").Run() })
		waitAddrUp(t, addr)
		h := newHostAt(t, addr)
		if h.GID.Addr() != netip.MustParseAddr(addr) { // an IPv6 GID is the address itself
			t.Fatalf("IPv6 GID %v on %s", h.GID, addr)
		}
		return h
	}
	t.Fatal("no free IPv6 address in fd00:6f76:6572::/64")
	return nil
}

// waitAddrUp waits until a datagram from ::1 reaches a freshly added address: UD does not
// retransmit, so the test must not start before the address delivers.
func waitAddrUp(t *testing.T, addr string) {
	dst, err := net.ListenPacket("udp6", "["+addr+"]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	src, err := net.ListenPacket("udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	buf := make([]byte, 8)
	for i := 0; i < 100; i++ {
		src.WriteTo([]byte("up"), dst.LocalAddr())
		dst.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, _, err := dst.ReadFrom(buf); err == nil {
			return
		}
	}
	t.Fatalf("%s never delivered a datagram", addr)
}

func TestSRQSixteenQPs(t *testing.T) {
	a, b := newHost(t), newHost(t)
	srq, err := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 64, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	const nqp, per = 16, 8
	buf := b.MR(t, 64*nqp*per, allAccess)
	for i := 0; i < 64 && i < nqp*per; i++ {
		srq.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{buf.SGE(64*i, 64)}})
	}
	events := b.Dev.Events()
	if err := srq.Arm(8); err != nil {
		t.Fatal(err)
	}
	src := a.MR(t, 64, allAccess)
	var qas []*verbs.QP
	for i := 0; i < nqp; i++ {
		qa := a.QP(t, verbs.QPTypeRC)
		qb, err := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.RCQ, SRQ: srq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		connect(t, qa, defaultRC(), b.GID, qb.QPN(), 1, 2)
		connect(t, qb, defaultRC(), a.GID, qa.QPN(), 2, 1)
		qas = append(qas, qa)
	}
	posted := 64
	got := map[uint32]int{}
	for round := 0; round < per; round++ {
		for i, qa := range qas {
			copy(src.Buf(), []byte{byte(i)})
			if err := qa.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 16)}}); err != nil {
				t.Fatal(err)
			}
			expectStatus(t, a.CQ, uint64(i), verbs.WCSuccess)
		}
		for _, wc := range waitWC(t, b.RCQ, nqp, 5*time.Second) {
			if wc.Status != verbs.WCSuccess || wc.ByteLen != 16 {
				t.Fatalf("SRQ completion %+v", wc)
			}
			got[wc.QPN]++
			if posted < nqp*per {
				srq.PostRecv(verbs.RecvWR{ID: uint64(posted), SGL: []verbs.SGE{buf.SGE(64*posted, 64)}})
				posted++
			}
		}
	}
	if len(got) != nqp {
		t.Fatalf("completions came from %d QPs, want %d", len(got), nqp)
	}
	// The limit (8) was crossed once after arming: exactly one event.
	n := 0
	timeout := time.After(200 * time.Millisecond)
loop:
	for {
		select {
		case ev := <-events:
			if ev.Type == verbs.EventSRQLimitReached {
				if ev.SRQ != srq {
					t.Fatalf("event for another SRQ: %+v", ev)
				}
				n++
			}
		case <-timeout:
			break loop
		}
	}
	if n != 1 {
		t.Fatalf("%d SRQ limit events, want 1", n)
	}
}

func TestEmptySRQAnswersRNR(t *testing.T) {
	a, b := newHost(t), newHost(t)
	srq, _ := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1})
	qa := a.QP(t, verbs.QPTypeRC)
	qb, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: b.RCQ, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 1, 2)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 2, 1)
	src, dst := a.MR(t, 16, allAccess), b.MR(t, 16, allAccess)
	qa.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}})
	time.Sleep(20 * time.Millisecond)
	srq.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{dst.SGE(0, 16)}})
	expectStatus(t, a.CQ, 1, verbs.WCSuccess)
	expectStatus(t, b.RCQ, 2, verbs.WCSuccess)
	if b.Dev.Counters().Get("send_rnr_nak") == 0 {
		t.Fatal("an empty SRQ did not answer with RNR NAK")
	}
}

func TestCQOverflowIsAnErrorNotAHang(t *testing.T) {
	a, b := newHost(t), newHost(t)
	small, _ := b.Dev.CreateCQ(2, nil)
	qa := a.QP(t, verbs.QPTypeRC)
	qb, _ := b.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.CQ, RecvCQ: small, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	connect(t, qa, defaultRC(), b.GID, qb.QPN(), 1, 2)
	connect(t, qb, defaultRC(), a.GID, qa.QPN(), 2, 1)
	src, dst := a.MR(t, 16, allAccess), b.MR(t, 16, allAccess)
	for i := 0; i < 4; i++ {
		qb.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(0, 16)}})
		qa.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}})
	}
	waitWC(t, a.CQ, 4, 5*time.Second)
	wcs := make([]verbs.WC, 8)
	n, err := small.Poll(wcs)
	if n != 2 || err != nil {
		t.Fatalf("first poll: %d %v", n, err)
	}
	if _, err := small.Poll(wcs); !errors.Is(err, verbs.ErrCQOverflow) {
		t.Fatalf("overrun CQ polled with %v", err)
	}
}

func TestRCIPv6(t *testing.T) {
	a, b := ipv6Host(t), ipv6Host(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src, dst := a.MR(t, 8192, allAccess), b.MR(t, 8192, allAccess)
	fill(src.Buf(), 6)
	p.QB.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 8192)}})
	p.QA.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 3000)}},
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 5000)}, RemoteAddr: dst.AddrOf(3000), RKey: dst.RKey()},
		verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 5000)}, RemoteAddr: dst.AddrOf(3000), RKey: dst.RKey()},
		verbs.SendWR{ID: 4, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(8000, 8)}, RemoteAddr: dst.AddrOf(8184), RKey: dst.RKey(), CompareAdd: 1})
	for _, wc := range waitWC(t, a.CQ, 4, 5*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	expectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if !bytes.Equal(dst.Buf()[:3000], src.Buf()[:3000]) || !bytes.Equal(dst.Buf()[3000:8000], src.Buf()[:5000]) {
		t.Fatal("IPv6 RC data differs")
	}
}

// TestAHAttrFromWCIPv6SourceLooksLikeIPv4: byte 20 of an IPv6 GRH is byte 12 of its
// source address; an address with 0x4_ there (one in sixteen) is still an IPv6 source.
// An IPv4 GRH area is recognised whatever its first 20 bytes hold.
func TestAHAttrFromWCIPv6SourceLooksLikeIPv4(t *testing.T) {
	wc := &verbs.WC{Flags: verbs.WCWithGRH}
	src := netip.MustParseAddr("fd00::4500:1") // byte 12 is 0x45
	grh := make([]byte, verbs.GRHLen)
	grh[0], grh[6], grh[7] = 0x60, 17, 64
	copy(grh[8:24], src.AsSlice())
	a, err := verbs.AHAttrFromWC(wc, grh, 1)
	if err != nil || a.DGID.Addr() != src {
		t.Fatalf("IPv6 GRH from %v: %v, %v", src, a.DGID, err)
	}
	v4 := netip.MustParseAddr("127.1.2.3")
	grh = bytes.Repeat([]byte{0x66}, verbs.GRHLen) // what the hardware left in the first 20 bytes
	ip := wire.IPHeader{Src: v4, Dst: netip.MustParseAddr("127.3.2.1"), SrcPort: 1, DstPort: wire.UDPPort, DF: true}
	copy(grh[20:], wire.AppendIPUDP(nil, &ip, 8)[:20])
	if a, err = verbs.AHAttrFromWC(wc, grh, 1); err != nil || a.DGID.Addr() != v4 {
		t.Fatalf("IPv4 GRH from %v after 0x66 bytes: %v, %v", v4, a.DGID, err)
	}
}

// TestUDPostedThenClosedLeaves: unsignaled UD sends posted in a stream and the QP
// destroyed at once (mckey's sender does so: it posts its messages, leaves the group
// and destroys everything) all reach the peer. A stream's posts may wait for the
// device's sender goroutine (deferPost); Close dropped them, and mckey's receiver,
// attached to the group and waiting for its messages, waited for ever.
func TestUDPostedThenClosedLeaves(t *testing.T) {
	const qkey, n = 0x11111111, 10
	a, b := newHost(t), newHost(t)
	qa, qb := udQP(t, a, qkey), udQP(t, b, qkey)
	src, dst := a.MR(t, 64, allAccess), b.MR(t, n*(64+verbs.GRHLen), allAccess)
	ah, err := a.PD.CreateAH(verbs.AHAttr{DGID: b.GID, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := qb.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(i*(64+verbs.GRHLen), 64+verbs.GRHLen)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := qa.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 64)},
			AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
	}
	if err := qa.Close(); err != nil {
		t.Fatal(err)
	}
	for _, wc := range waitWC(t, b.RCQ, n, 5*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("receive %+v", wc)
		}
	}
}
