package engine_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Transport tests on the deterministic simulated network: seeded loss, reordering,
// duplication and delay, fake time under testing/synctest. The network is in memory:
// its addresses never reach a socket.

func simHost(t *testing.T, n *simnet.Network, addr string) *host {
	t.Helper()
	c, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), wire.UDPPort))
	if err != nil {
		t.Fatal(err)
	}
	var log *slog.Logger
	if os.Getenv("GOVERBS_TEST_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr), Conn: c, MTU: verbs.MTU1024, Logger: log})
}

// mixedStream runs n messages of mixed kinds over one RC connection and checks that each
// arrives exactly once, in order, byte for byte, and that atomics are exact.
func mixedStream(t *testing.T, a, b *host, n int, maxSize int, seed uint64) {
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	const slots, slotSize, depth = 256, 8192, 16
	src := a.MR(t, slots*slotSize, allAccess)
	recvBuf := b.MR(t, slots*slotSize, allAccess) // SEND receive buffers
	sink := b.MR(t, slots*slotSize, allAccess)    // WRITE targets
	readSrc := b.MR(t, slots*slotSize, allAccess)
	fill(readSrc.Buf(), seed)
	readDst := a.MR(t, slots*slotSize, allAccess)
	counter := b.MR(t, 8, allAccess)
	atomRes := a.MR(t, 8*slots, allAccess)

	sizeOf := func(i int) int { return int((uint64(i)*2654435761 + seed) % uint64(maxSize+1)) }
	pattern := func(buf []byte, i int) {
		for k := range buf {
			buf[k] = byte(i*31 + k*7)
		}
	}
	for i := 0; i < 64; i++ {
		p.QB.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{recvBuf.SGE((i%slots)*slotSize, slotSize)}})
	}
	posted, recvPosted, done := 0, 64, 0
	wantRecv := 0 // SENDs and WRITE_WITH_IMMs arrive in posting order
	kinds := make([]int, n)
	var atomics uint64
	wcs := make([]verbs.WC, 32)
	deadline := time.Now().Add(time.Duration(n) * 50 * time.Millisecond)
	for done < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d done by the deadline\n%s", done, n, debugA(p))
		}
		// Receiver: each SEND or WRITE_WITH_IMM, in order, with its bytes.
		k, _ := b.RCQ.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("receive completion %+v\n%s", wc, debugB(p))
			}
			for wantRecv < n && kinds[wantRecv]%4 >= 2 {
				wantRecv++
			}
			i := wantRecv
			wantRecv++
			size := sizeOf(i)
			slot := (i % slots) * slotSize
			want := make([]byte, size)
			pattern(want, i)
			switch {
			case kinds[i]%4 == 0 && (wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != size):
				t.Fatalf("message %d: SEND completion %+v, want %d bytes", i, wc, size)
			case kinds[i]%4 == 1 && (wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Imm != uint32(i) || int(wc.ByteLen) != size):
				t.Fatalf("message %d: WRITE_WITH_IMM completion %+v, want imm %d", i, wc, i)
			}
			got := sink.Buf()[slot : slot+size]
			if kinds[i]%4 == 0 {
				got = recvBuf.Buf()[(int(wc.ID)%slots)*slotSize:][:size]
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("message %d (kind %d): bytes differ", i, kinds[i]%4)
			}
			if recvPosted < n {
				p.QB.PostRecv(verbs.RecvWR{ID: uint64(recvPosted), SGL: []verbs.SGE{recvBuf.SGE((recvPosted%slots)*slotSize, slotSize)}})
				recvPosted++
			}
		}
		// Requester: completions in posting order; READ data and atomic results checked.
		k, _ = a.CQ.Poll(wcs)
		for _, wc := range wcs[:k] {
			i := int(wc.ID)
			if wc.Status != verbs.WCSuccess || i != done {
				t.Fatalf("send completion %+v, want message %d\n%s", wc, done, debugA(p))
			}
			slot := (i % slots) * slotSize
			switch kinds[i] % 4 {
			case 2:
				size := sizeOf(i)
				if !bytes.Equal(readDst.Buf()[slot:slot+size], readSrc.Buf()[slot:slot+size]) {
					t.Fatalf("message %d: READ bytes differ", i)
				}
			case 3:
				if got := binary.NativeEndian.Uint64(atomRes.Buf()[8*(i%slots):]); got != atomics {
					t.Fatalf("message %d: FETCH_AND_ADD returned %d, want %d (executed twice or lost)", i, got, atomics)
				}
				atomics++
			}
			done++
		}
		// Post while the window allows.
		for posted < n && posted-done < depth {
			i := posted
			kinds[i] = int((uint64(i)*0x9e3779b9 + seed) >> 7 % 4)
			size := sizeOf(i)
			slot := (i % slots) * slotSize
			wr := verbs.SendWR{ID: uint64(i), Flags: verbs.SendSignaled}
			switch kinds[i] % 4 {
			case 0:
				pattern(src.Buf()[slot:slot+size], i)
				wr.Opcode, wr.SGL = verbs.WRSend, []verbs.SGE{src.SGE(slot, size)}
			case 1:
				pattern(src.Buf()[slot:slot+size], i)
				wr.Opcode, wr.SGL, wr.Imm = verbs.WRRDMAWriteWithImm, []verbs.SGE{src.SGE(slot, size)}, uint32(i)
				wr.RemoteAddr, wr.RKey = sink.AddrOf(slot), sink.RKey()
			case 2:
				wr.Opcode, wr.SGL = verbs.WRRDMARead, []verbs.SGE{readDst.SGE(slot, size)}
				wr.RemoteAddr, wr.RKey = readSrc.AddrOf(slot), readSrc.RKey()
			case 3:
				wr.Opcode, wr.SGL = verbs.WRAtomicFetchAdd, []verbs.SGE{atomRes.SGE(8*(i%slots), 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = counter.Addr(), counter.RKey(), 1
			}
			if err := p.QA.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		if k == 0 {
			time.Sleep(100 * time.Microsecond) // fake time: lets the network deliver
		}
	}
	if got := binary.NativeEndian.Uint64(counter.Buf()); got != atomics {
		t.Fatalf("counter %d after %d atomics", got, atomics)
	}
}

func TestRCMixedOverLossyNetwork(t *testing.T) {
	faults := []struct {
		name string
		f    simnet.Faults
	}{
		{"clean", simnet.Faults{Delay: 20 * time.Microsecond}},
		{"loss", simnet.Faults{Loss: 0.05, Delay: 20 * time.Microsecond}},
		{"reorder", simnet.Faults{Reorder: 0.05, ReorderDelay: 200 * time.Microsecond, Delay: 20 * time.Microsecond}},
		{"duplicate", simnet.Faults{Duplicate: 0.05, Delay: 20 * time.Microsecond}},
		{"corrupt", simnet.Faults{Corrupt: 0.05, Delay: 20 * time.Microsecond}},
		{"all", simnet.Faults{Loss: 0.05, Reorder: 0.05, Duplicate: 0.05, ReorderDelay: 200 * time.Microsecond,
			Delay: 20 * time.Microsecond, Jitter: 10 * time.Microsecond}},
	}
	for i, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			n := 2000
			if f.name == "all" {
				n = 10000
			}
			if testing.Short() {
				n /= 10
			}
			synctest.Test(t, func(t *testing.T) {
				net := simnet.New(uint64(1000+i), f.f)
				a, b := simHost(t, net, "127.0.100.1"), simHost(t, net, "127.0.100.2")
				mixedStream(t, a, b, n, 3000, uint64(i))
				t.Logf("%+v", net.Stats())
				a.Dev.Close()
				b.Dev.Close()
			})
		})
	}
}

// dropOnce drops the first datagram whose opcode is op (and, if psnOff >= 0, whose PSN is
// the first such packet's PSN plus psnOff).
func dropOnce(n *simnet.Network, op wire.Opcode) *int {
	dropped := new(int)
	n.SetFilter(func(src, dst netip.AddrPort, b []byte) simnet.Verdict {
		if *dropped == 0 && len(b) > 0 && wire.Opcode(b[0]) == op {
			*dropped++
			return simnet.Drop
		}
		return simnet.Pass
	})
	return dropped
}

func TestRCReadReplayWhenAResponseIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1, simnet.Faults{Delay: 10 * time.Microsecond})
		a, b := simHost(t, n, "127.0.100.1"), simHost(t, n, "127.0.100.2")
		p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
		src, dst := b.MR(t, 8192, allAccess), a.MR(t, 8192, allAccess)
		fill(src.Buf(), 3)
		dropped := dropOnce(n, wire.RCReadResponseMiddle)
		p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{dst.SGE(0, 5000)},
			RemoteAddr: src.Addr(), RKey: src.RKey()})
		wc := expectStatus(t, a.CQ, 1, verbs.WCSuccess)
		if *dropped != 1 || wc.ByteLen != 5000 || !bytes.Equal(dst.Buf()[:5000], src.Buf()[:5000]) {
			t.Fatalf("dropped %d, completion %+v, data equal %v", *dropped, wc, bytes.Equal(dst.Buf()[:5000], src.Buf()[:5000]))
		}
		if b.Dev.Counters().Get("duplicate_request") == 0 {
			t.Fatal("the READ was not asked for again")
		}
	})
}

func TestRCAtomicReplayWhenTheAckIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1, simnet.Faults{Delay: 10 * time.Microsecond})
		a, b := simHost(t, n, "127.0.100.1"), simHost(t, n, "127.0.100.2")
		p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
		counter, res := b.MR(t, 8, allAccess), a.MR(t, 8, allAccess)
		binary.NativeEndian.PutUint64(counter.Buf(), 40)
		dropped := dropOnce(n, wire.RCAtomicAck)
		p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{res.SGE(0, 8)},
			RemoteAddr: counter.Addr(), RKey: counter.RKey(), CompareAdd: 2})
		expectStatus(t, a.CQ, 1, verbs.WCSuccess)
		// The retried request is answered from the saved result: executed once.
		if *dropped != 1 || binary.NativeEndian.Uint64(res.Buf()) != 40 || binary.NativeEndian.Uint64(counter.Buf()) != 42 {
			t.Fatalf("dropped %d, returned %d, counter %d", *dropped, binary.NativeEndian.Uint64(res.Buf()), binary.NativeEndian.Uint64(counter.Buf()))
		}
		if b.Dev.Counters().Get("duplicate_request") != 1 {
			t.Fatalf("duplicate requests %d, want 1", b.Dev.Counters().Get("duplicate_request"))
		}
	})
}

func TestRCRetryExceededTakesTimeoutTimesRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1, simnet.Faults{Delay: 10 * time.Microsecond})
		a, b := simHost(t, n, "127.0.100.1"), simHost(t, n, "127.0.100.2")
		params := defaultRC()
		params.Timeout, params.Retry = 14, 3 // 67.1 ms per try, 4 tries
		qa, qb := a.QP(t, verbs.QPTypeRC), b.QP(t, verbs.QPTypeRC)
		connect(t, qa, params, b.GID, qb.QPN(), 1, 2)
		connect(t, qb, params, a.GID, qa.QPN(), 2, 1)
		n.SetFilter(func(src, dst netip.AddrPort, b []byte) simnet.Verdict { return simnet.Drop }) // the peer is gone
		src := a.MR(t, 8, allAccess)
		start := time.Now()
		qa.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}},
			verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)}})
		expectStatus(t, a.CQ, 1, verbs.WCRetryExcErr)
		expectStatus(t, a.CQ, 2, verbs.WCWRFlushErr)
		want := 4 * 4096 * time.Nanosecond << 14
		if el := time.Since(start); el < want || el > want+want/4 {
			t.Fatalf("retry exceeded after %v, want about %v", el, want)
		}
	})
}

// The local ACK timeout counts from the last progress, not from the first send: steady
// traffic whose every message is acknowledged long before the timeout never times out,
// however long it runs; once the peer goes silent, the timeout comes after at least one
// period and, since the timer is not moved per message, at most one and a half.
func TestRCTimeoutCountsFromLastProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := simnet.New(1, simnet.Faults{Delay: 10 * time.Microsecond})
		a, b := simHost(t, n, "127.0.100.1"), simHost(t, n, "127.0.100.2")
		params := defaultRC()
		params.Timeout, params.Retry = 10, 0 // 4.19 ms; the first timeout fails the WQE
		period := 4096 * time.Nanosecond << 10
		qa, qb := a.QP(t, verbs.QPTypeRC), b.QP(t, verbs.QPTypeRC)
		connect(t, qa, params, b.GID, qb.QPN(), 1, 2)
		connect(t, qb, params, a.GID, qa.QPN(), 2, 1)
		src, dst := a.MR(t, 8, allAccess), b.MR(t, 8, allAccess)
		write := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 8)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}
		// Ten periods of messages every 10 µs, each acknowledged 20 µs later: there is
		// always one outstanding, so the timer runs throughout.
		wcs := make([]verbs.WC, 16)
		sent, done := 0, 0
		for end := time.Now().Add(10 * period); time.Now().Before(end); sent++ {
			write.ID = uint64(sent)
			if err := qa.PostSend(write); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Microsecond)
			k, _ := a.CQ.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %+v after %d sends", wc, sent)
				}
			}
			done += k
		}
		for done < sent {
			expectStatus(t, a.CQ, uint64(done), verbs.WCSuccess)
			done++
		}
		if got := qa.Counters().RetryTimeouts; got != 0 {
			t.Fatalf("%d timeouts while every message was acknowledged", got)
		}
		n.SetFilter(func(src, dst netip.AddrPort, b []byte) simnet.Verdict { return simnet.Drop })
		start := time.Now()
		write.ID = 99
		qa.PostSend(write)
		expectStatus(t, a.CQ, 99, verbs.WCRetryExcErr)
		if el := time.Since(start); el < period || el > period+period/2 {
			t.Fatalf("timed out %v after the last send, want between %v and %v", el, period, period+period/2)
		}
	})
}
