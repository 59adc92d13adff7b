//go:build linux

package afxdp_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
)

// TestNoAllocs: in steady state a WriteBatch (a run of four datagrams of 1010 bytes gathered from two
// slices) and the ReadBatch that receives it allocate nothing.
func TestNoAllocs(t *testing.T) {
	n := newTestNet(t, 1500)
	a := openXDP(t, n, n.AddrA, afxdp.Options{})
	b := openPeerXDP(t, n)
	hdr, payload := make([]byte, 40), make([]byte, 4000)
	out := []netio.Message{{Iov: [][]byte{hdr, payload}, N: len(hdr) + len(payload), SegSize: 1010, Addr: b.LocalAddr()}}
	in := make([]netio.Message, 8)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	round := func() {
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 4; {
			if ok, err := b.WaitReadable(2 * time.Second); !ok || err != nil {
				t.Fatalf("nothing arrived: %v", err)
			}
			k, err := b.ReadBatch(in)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	round() // resolve the neighbour, warm up
	if allocs := testing.AllocsPerRun(50, round); allocs > 0 {
		t.Errorf("%.1f allocations per write and read", allocs)
	}
}

// TestTxKicks: in copy mode a batch of 64 datagrams costs one sendto where the kernel
// lets the transmit budget cover the ring (Linux 6.17 on), and at most three otherwise.
func TestTxKicks(t *testing.T) {
	n := newTestNet(t, 1500)
	a := openXDP(t, n, n.AddrA, afxdp.Options{})
	b := openPeerXDP(t, n)
	out := make([]netio.Message, 64)
	for i := range out {
		out[i] = netio.Message{Buf: make([]byte, 1000), N: 1000, Addr: b.LocalAddr()}
	}
	if _, err := a.WriteBatch(out[:1]); err != nil { // resolve the neighbour
		t.Fatal(err)
	}
	before := a.Stats().TxKicks
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	kicks := a.Stats().TxKicks - before
	budget := a.Info().TxBudget
	t.Logf("transmit budget %d: %d sendto for 64 datagrams", budget, kicks)
	if budget >= 64 && kicks != 1 || kicks > 3 {
		t.Errorf("%d sendto calls for a batch of 64 (budget %d)", kicks, budget)
	}
}

// TestTxFramesReused: single datagrams sent one at a time (a ping-pong's replies) go out
// in the few frames the kernel has just completed, which this CPU's cache still holds,
// not in each of the send half's 2048 frames in turn (a cache miss on every datagram's
// copy into its frame and on the kernel's read of it).
func TestTxFramesReused(t *testing.T) {
	n := newTestNet(t, 1500)
	a := openXDP(t, n, n.AddrA, afxdp.Options{})
	b := openPeerXDP(t, n)
	out := []netio.Message{{Buf: make([]byte, 64), N: 64, Addr: b.LocalAddr()}}
	if _, err := a.WriteBatch(out); err != nil { // resolve the neighbour
		t.Fatal(err)
	}
	used := map[uint64]bool{}
	for range 16 {
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		used[afxdp.LastTxFrame(a)] = true
		time.Sleep(time.Millisecond) // what a kick sent has been completed
	}
	t.Logf("%s mode: 16 datagrams sent in %d frames", a.Mode(), len(used))
	if len(used) > 2 {
		t.Errorf("16 datagrams, one at a time, took %d frames: completed frames are not reused first", len(used))
	}
}
