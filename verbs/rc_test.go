package verbs

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func TestRCSendWriteReadOverUDP(t *testing.T) {
	a, b := newHost(t, "127.10.0.2"), newHost(t, "127.10.0.3")
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	const mtu = 1024
	sizes := []int{0, 1, mtu - 1, mtu, mtu + 1, 1 << 20}
	for _, n := range sizes {
		src := a.mr(t, max(n, 1), allAccess)
		dst := b.mr(t, max(n, 1), allAccess)
		fill(src.Buf(), uint64(n))

		// SEND
		if err := p.qb.PostRecv(RecvWR{ID: 7, SGL: []SGE{dst.SGE(0, max(n, 1))}}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{src.SGE(0, n)}}); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, a.cq, 1, 5*time.Second)[0]
		if wc.Status != WCSuccess || wc.Opcode != WCSend || wc.ID != 1 {
			t.Fatalf("size %d: send completion %+v", n, wc)
		}
		rwc := waitWC(t, b.rcq, 1, 5*time.Second)[0]
		if rwc.Status != WCSuccess || rwc.Opcode != WCRecv || rwc.ByteLen != uint32(n) || rwc.ID != 7 || rwc.QPN != p.qb.QPN() {
			t.Fatalf("size %d: recv completion %+v", n, rwc)
		}
		if !bytes.Equal(dst.Buf()[:n], src.Buf()[:n]) {
			t.Fatalf("size %d: SEND data differs", n)
		}

		// WRITE
		clear(dst.Buf())
		fill(src.Buf(), uint64(n)+1)
		if err := p.qa.PostSend(SendWR{ID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{src.SGE(0, n)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCRDMAWrite {
			t.Fatalf("size %d: write completion %+v", n, wc)
		}
		if !bytes.Equal(dst.Buf()[:n], src.Buf()[:n]) {
			t.Fatalf("size %d: WRITE data differs", n)
		}

		// READ back into a fresh buffer
		back := a.mr(t, max(n, 1), allAccess)
		if err := p.qa.PostSend(SendWR{ID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{back.SGE(0, n)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCRDMARead || wc.ByteLen != uint32(n) {
			t.Fatalf("size %d: read completion %+v", n, wc)
		}
		if !bytes.Equal(back.Buf()[:n], src.Buf()[:n]) {
			t.Fatalf("size %d: READ data differs", n)
		}
	}
}

func TestRCAtomics(t *testing.T) {
	a, b := newHost(t, "127.10.0.2"), newHost(t, "127.10.0.3")
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	target := b.mr(t, 64, allAccess)
	binary.NativeEndian.PutUint64(target.Buf()[8:], 100)
	res := a.mr(t, 16, allAccess)

	if err := p.qa.PostSend(SendWR{ID: 1, Opcode: WRAtomicFetchAdd, Flags: SendSignaled, SGL: []SGE{res.SGE(0, 8)},
		RemoteAddr: target.AddrOf(8), RKey: target.RKey(), CompareAdd: 5}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, a.cq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCFetchAdd || wc.ByteLen != 8 {
		t.Fatalf("fetch-add completion %+v", wc)
	}
	if got := binary.NativeEndian.Uint64(res.Buf()); got != 100 {
		t.Fatalf("fetch-add returned %d, want 100", got)
	}
	if got := binary.NativeEndian.Uint64(target.Buf()[8:]); got != 105 {
		t.Fatalf("target %d after fetch-add, want 105", got)
	}
	// Compare-and-swap that fails, then one that succeeds.
	for i, c := range []struct{ cmp, swap, want, after uint64 }{{1, 7, 105, 105}, {105, 7, 105, 7}} {
		if err := p.qa.PostSend(SendWR{ID: uint64(10 + i), Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled,
			SGL: []SGE{res.SGE(8, 8)}, RemoteAddr: target.AddrOf(8), RKey: target.RKey(), CompareAdd: c.cmp, Swap: c.swap}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.cq, 1, 5*time.Second)[0]; wc.Status != WCSuccess || wc.Opcode != WCCompSwap {
			t.Fatalf("cmp-swap completion %+v", wc)
		}
		if got := binary.NativeEndian.Uint64(res.Buf()[8:]); got != c.want {
			t.Fatalf("cmp-swap %d returned %d, want %d", i, got, c.want)
		}
		if got := binary.NativeEndian.Uint64(target.Buf()[8:]); got != c.after {
			t.Fatalf("cmp-swap %d left %d, want %d", i, got, c.after)
		}
	}
}
