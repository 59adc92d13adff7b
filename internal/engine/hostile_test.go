package engine

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestHostileDatagramsOverUDP throws a few thousand random and mutated datagrams over real
// UDP at a device whose QPs are live — an RC QP connected to a real peer device and a UD
// QP — partly from the RC peer's own IP address (another port), so that they pass the
// address check. Afterwards: guard zones, unregistered memory and regions without the
// right are unchanged, the region with every right changed only where a delivered request
// with its key aimed; the RC connection either still works or has failed cleanly (a
// completion, no hang); and a new connection between the same devices moves data exactly.
func TestHostileDatagramsOverUDP(t *testing.T) {
	const total = 3000
	if testing.Short() {
		t.Skip("real UDP storm")
	}
	devA, devB := openUDPDevice(t), openUDPDevice(t)
	addrA, addrB := devA.LocalAddr().Addr(), devB.LocalAddr().Addr() // the RC peer, the device under attack
	addrEvil := testaddr.Addr(testaddr.Engine)                       // for a socket on port 0
	pdA, _ := devA.allocPD()
	pdB, _ := devB.allocPD()
	pdB2, _ := devB.allocPD()
	ar, err := newArena(pdB, pdB2)
	if err != nil {
		t.Fatal(err)
	}
	cqA, _ := devA.newCQ(4096)
	cqB, _ := devB.newCQ(4096)
	qpCap := driver.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}
	mkQP := func(d *Device, pd *PD, cq *CQ, typ driver.QPType) *QP {
		qp, err := d.CreateQP(pd, QPInit{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: qpCap})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	qa, qb := mkQP(devA, pdA, cqA, driver.QPTypeRC), mkQP(devB, pdB, cqB, driver.QPTypeRC)
	uc := mkQP(devB, pdB, cqB, driver.QPTypeUC)
	ud := mkQP(devB, pdB, cqB, driver.QPTypeUD)
	// PSNs start at 0 on both sides, so the mutated seeds (PSN 0, 1, 2 …) hit the RC
	// responder's expected PSN: the storm can and does interfere with the connection.
	rcUp(t, qa, addrB, qb.QPN(), 0, 0)
	rcUp(t, qb, addrA, qa.QPN(), 0, 0)
	rcUp(t, uc, addrA, 0x99, 0, 0)
	udUp(t, ud, fuzzQKey)
	postRecvs := func(qp *QP) {
		for k := 0; k < 10; k++ {
			if qp == [...]*QP{qb, qb, qb, qb, uc, uc, uc, ud, ud, ud}[k] {
				must(t, qp.PostRecv([]driver.RecvWR{{ID: uint64(k), SGL: []driver.SGE{ar.recvSGE(k)}}}))
			}
		}
	}
	postRecvs(qb)
	postRecvs(uc)
	postRecvs(ud)
	// revive brings a QP the storm has moved to the error state up again (its receives
	// reposted), so that the storm keeps reaching live responders rather than the state
	// check.
	revived := 0
	revive := func() {
		for _, qp := range []*QP{qb, uc, ud} {
			if qp.State() != driver.QPStateErr {
				continue
			}
			revived++
			must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateReset}, driver.QPAttrState))
			switch qp {
			case qb:
				rcUp(t, qb, addrA, qa.QPN(), 0, 0)
			case uc:
				rcUp(t, uc, addrA, 0x99, 0, 0)
			default:
				udUp(t, ud, fuzzQKey)
			}
			postRecvs(qp)
		}
	}

	listen := func(addr netip.Addr) netio.Conn {
		c, err := netio.ListenUDP(netip.AddrPortFrom(addr, 0), netio.UDPOptions{DisableGSO: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	spoof, evil := listen(addrA), listen(addrEvil) // spoof: the RC peer's IP, another port
	if shmOn() {
		// The spoofer reaches devB through a ring, the evil socket over UDP: the storm
		// crosses both paths.
		spoof = sameHostWrap(t, spoof)
		r, _ := netio.AsResolver(spoof)
		r.Resolve(devB.LocalAddr())
	}
	cd := codec{local: devB.LocalAddr(), srcs: [4]netip.AddrPort{spoof.SourceAddr(), spoof.SourceAddr(), evil.SourceAddr(), evil.SourceAddr()},
		qps: [3]*QP{qb, uc, ud}, remote: ar.remote}

	rng := rand.New(rand.NewPCG(6, 6))
	seeds := fuzzSeeds()
	var sent []datagram
	batch := make([]netio.Message, 0, 16)
	flush := func(c netio.Conn) {
		if len(batch) > 0 {
			c.WriteBatch(batch) // refused datagrams are just lost
			batch = batch[:0]
		}
	}
	for len(sent) < total {
		var dgs []datagram
		if rng.IntN(8) == 0 {
			// Pure noise with a sometimes-right ICRC.
			b := make([]byte, rng.IntN(1200))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			dgs = cd.decode(append([]byte{byte(rng.IntN(256)), byte(len(b) >> 8), byte(len(b))}, b...))
		} else {
			dgs = cd.decode(mutate(rng, seeds[rng.IntN(len(seeds))]))
		}
		for _, d := range dgs {
			c := spoof
			if d.from == evil.SourceAddr() {
				c = evil
			}
			batch = append(batch, netio.Message{Buf: d.b, N: len(d.b), Addr: devB.LocalAddr()})
			flush(c)
			sent = append(sent, d)
		}
		if len(sent)%32 < len(dgs) {
			time.Sleep(200 * time.Microsecond) // let the receive loop keep up
			revive()
		}
	}

	// Fence: a fresh UD QP, and one datagram for it from the evil socket. The device reads
	// its socket in order, so once the datagram completes every storm datagram before it
	// has been processed — and the completion (through the CQ's lock) orders the device's
	// memory writes before the checks below.
	fence := mkQP(devB, pdB, cqB, driver.QPTypeUD)
	udUp(t, fence, 0x5a5a)
	fenceBuf := make([]byte, 1024)
	fenceMR, _ := pdB.regMR(fenceBuf, driver.AccessLocalWrite)
	must(t, fence.PostRecv([]driver.RecvWR{{ID: 0xfe, SGL: []driver.SGE{{Addr: fenceMR.Addr(), Length: 1024, LKey: fenceMR.LKey()}}}}))
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xffff, DestQP: fence.QPN()},
		DETH: wire.DETHFields{QKey: 0x5a5a, SrcQP: 1}}
	pkt := make([]byte, 64)
	n := wire.Finish(pkt, h.Encode(pkt), 4)
	ip := wire.IPHeader{Src: evil.SourceAddr().Addr(), Dst: devB.LocalAddr().Addr(), SrcPort: evil.SourceAddr().Port(), DstPort: wire.UDPPort, DF: true}
	wire.PutICRC(&ip, pkt, n)
	wcs := make([]driver.WC, 64)
	deadline := time.Now().Add(10 * time.Second)
	fenced := false
	for !fenced {
		if time.Now().After(deadline) {
			t.Fatalf("the device never processed the fence datagram (wedged?)\n%s", qb.DebugString())
		}
		evil.WriteBatch([]netio.Message{{Buf: pkt, N: n + wire.ICRCLen, Addr: devB.LocalAddr()}})
		for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end) && !fenced; {
			k, _ := cqB.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.ID == 0xfe && wc.QPN == fence.QPN() {
					fenced = true
				}
			}
			if k == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for _, qp := range []*QP{qb, uc, ud} {
		qp.State() // and every QP's lock, for the memory of requests in flight
	}
	if v := ar.violation(sent); v != "" {
		t.Fatalf("after %d hostile datagrams: %s", len(sent), v)
	}
	cs := map[string]uint64{}
	devB.counters.Each(func(name string, v uint64) {
		if v != 0 {
			cs[name] = v
		}
	})
	t.Logf("%d datagrams sent, QPs revived %d times; device counters: %v; RC QP %v", len(sent), revived, cs, qb.State())
	if cs["rcvd_pkts"] < total/2 {
		t.Fatalf("only %d of %d datagrams arrived", cs["rcvd_pkts"], total)
	}
	if shmOn() && devB.Counters().Get("samehost_rx_pkts") < total/4 {
		t.Fatalf("only %d hostile datagrams came through the ring", devB.Counters().Get("samehost_rx_pkts"))
	}

	// The connection the storm hit: a SEND either completes or fails, never hangs.
	srcA := make([]byte, 4096)
	for i := range srcA {
		srcA[i] = byte(i * 13)
	}
	mrA, _ := pdA.regMR(srcA, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead)
	recvB := make([]byte, 4096)
	mrB, _ := pdB.regMR(recvB, driver.AccessLocalWrite|driver.AccessRemoteWrite|driver.AccessRemoteRead|driver.AccessRemoteAtomic)
	qb.PostRecv([]driver.RecvWR{{ID: 500, SGL: []driver.SGE{{Addr: mrB.Addr(), Length: 4096, LKey: mrB.LKey()}}}})
	if err := qa.PostSend([]driver.SendWR{{ID: 501, Opcode: driver.WRSend, Flags: driver.SendSignaled, SGL: []driver.SGE{{Addr: mrA.Addr(), Length: 100, LKey: mrA.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	wc := waitFor(t, cqA, 501, 10*time.Second)
	t.Logf("old connection after the storm: %v (QP A %v, QP B %v)", wc.Status, qa.State(), qb.State())

	// A new connection between the same two devices works, byte for byte.
	qa2, qb2 := mkQP(devA, pdA, cqA, driver.QPTypeRC), mkQP(devB, pdB, cqB, driver.QPTypeRC)
	rcUp(t, qa2, addrB, qb2.QPN(), 0x777, 0x333)
	rcUp(t, qb2, addrA, qa2.QPN(), 0x333, 0x777)
	clear(recvB)
	readBack := make([]byte, 4096)
	mrRB, _ := pdA.regMR(readBack, driver.AccessLocalWrite)
	res := make([]byte, 8)
	mrRes, _ := pdA.regMR(res, driver.AccessLocalWrite)
	binary.NativeEndian.PutUint64(recvB[4088:], 40)
	must(t, qa2.PostSend([]driver.SendWR{
		{ID: 1, Opcode: driver.WRRDMAWrite, SGL: []driver.SGE{{Addr: mrA.Addr(), Length: 3000, LKey: mrA.LKey()}}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		{ID: 2, Opcode: driver.WRRDMARead, SGL: []driver.SGE{{Addr: mrRB.Addr(), Length: 3000, LKey: mrRB.LKey()}}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		{ID: 3, Opcode: driver.WRAtomicFetchAdd, Flags: driver.SendSignaled, SGL: []driver.SGE{{Addr: mrRes.Addr(), Length: 8, LKey: mrRes.LKey()}},
			RemoteAddr: mrB.Addr() + 4088, RKey: mrB.RKey(), CompareAdd: 2},
	}))
	if wc := waitFor(t, cqA, 3, 10*time.Second); wc.Status != driver.WCSuccess {
		t.Fatalf("new connection after the storm: %+v\n%s", wc, qa2.DebugString())
	}
	if !bytes.Equal(readBack[:3000], srcA[:3000]) || !bytes.Equal(recvB[:3000], srcA[:3000]) {
		t.Fatal("new connection: data differs")
	}
	if binary.NativeEndian.Uint64(res) != 40 || binary.NativeEndian.Uint64(recvB[4088:]) != 42 {
		t.Fatalf("new connection: FETCH_AND_ADD returned %d, left %d", binary.NativeEndian.Uint64(res), binary.NativeEndian.Uint64(recvB[4088:]))
	}
}

// waitFor polls cq until the completion of wr id arrives (others are discarded).
func waitFor(t *testing.T, cq *CQ, id uint64, within time.Duration) driver.WC {
	t.Helper()
	wcs := make([]driver.WC, 16)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		n, _ := cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.ID == id {
				return wc
			}
		}
		if n == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	t.Fatalf("no completion for wr %d within %v", id, within)
	return driver.WC{}
}

// openUDPDevice opens a device on a real UDP socket at port 4791 of a loopback address no
// other process holds, MTU 1024, closed when the test ends.
func openUDPDevice(t *testing.T) *Device {
	t.Helper()
	c := testaddr.Open(t, testaddr.Engine, func(a netip.Addr) (netio.Conn, error) {
		return netio.ListenUDP(netip.AddrPortFrom(a, wire.UDPPort), netio.UDPOptions{})
	})
	c = sameHostWrap(t, c)
	d, err := New(Config{Name: c.LocalAddr().Addr().String(), Conn: c, MTU: wire.MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// shmOn reports whether this run of the package's tests is the same-host one (TestMain).
func shmOn() bool { return os.Getenv("GOVERBS_SHM") != "0" }

// sameHostWrap gives c the same-host shortcut in the shm run, as the provider does.
func sameHostWrap(t *testing.T, c netio.Conn) netio.Conn {
	t.Helper()
	if !shmOn() {
		return c
	}
	sh, err := netio.ListenSameHost(c, netio.SameHostOptions{})
	if err != nil {
		t.Fatalf("same-host shortcut: %v", err)
	}
	return sh
}

// rcOnConn opens a device of the MTU given on conn (an in-memory Conn the test plays the
// peer through) with a PD, a CQ of cqDepth entries and an RC QP of the capacities given,
// still in RESET. The caller closes the device.
func rcOnConn(t testing.TB, name string, conn netio.Conn, mtu wire.MTU, cqDepth int, cap driver.QPCap) (*Device, *PD, *CQ, *QP) {
	t.Helper()
	dev, err := New(Config{Name: name, Conn: conn, MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := dev.allocPD()
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	cq, err := dev.newCQ(cqDepth)
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	qp, err := dev.CreateQP(pd, QPInit{Type: driver.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cap})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	return dev, pd, cq, qp
}

// rcUp brings an RC or UC QP from RESET to RTS towards peer.
func rcUp(t testing.TB, qp *QP, peer netip.Addr, destQPN uint32, rq, sq wire.PSN) {
	t.Helper()
	all := driver.AccessLocalWrite | driver.AccessRemoteWrite | driver.AccessRemoteRead | driver.AccessRemoteAtomic
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1, AccessFlags: all}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrAccessFlags))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTR, AH: driver.AHAttr{DGID: AddrToGID(peer), Port: 1}, PathMTU: wire.MTU1024,
		DestQPN: destQPN, RQPSN: uint32(rq), MaxDestRdAtomic: 16, MinRNRTimer: 1},
		driver.QPAttrState|driver.QPAttrAV|driver.QPAttrPathMTU|driver.QPAttrDestQPN|driver.QPAttrRQPSN|driver.QPAttrMaxDestRdAtomic|driver.QPAttrMinRNRTimer))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTS, SQPSN: uint32(sq), Timeout: 10, RetryCnt: 3, RNRRetry: 3, MaxRdAtomic: 16},
		driver.QPAttrState|driver.QPAttrSQPSN|driver.QPAttrTimeout|driver.QPAttrRetryCnt|driver.QPAttrRNRRetry|driver.QPAttrMaxQPRdAtomic))
}

func udUp(t testing.TB, qp *QP, qkey uint32) {
	t.Helper()
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1, QKey: qkey}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrQKey))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTR}, driver.QPAttrState))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTS}, driver.QPAttrState|driver.QPAttrSQPSN))
}

// mutate applies a few random edits to a seed input: bit flips, byte overwrites,
// truncation, a control byte changed, a record repeated.
func mutate(rng *rand.Rand, seed []byte) []byte {
	b := bytes.Clone(seed)
	for range 1 + rng.IntN(4) {
		if len(b) == 0 {
			break
		}
		i := rng.IntN(len(b))
		switch rng.IntN(6) {
		case 0, 1:
			b[i] ^= 1 << rng.IntN(8)
		case 2:
			b[i] = byte(rng.Uint32())
		case 3:
			b = b[:i]
		case 4:
			b = append(b, b[:min(len(b), 1+rng.IntN(64))]...)
		case 5:
			// Aim at a field that matters more often: the BTH of the first record.
			if len(b) > 3+wire.BTHLen {
				b[3+rng.IntN(wire.BTHLen)] = byte(rng.Uint32())
			}
		}
	}
	return b
}
