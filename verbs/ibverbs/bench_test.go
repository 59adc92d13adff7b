//go:build ibverbs

package ibverbs_test

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// BenchmarkRCWrite8PostPoll is one signaled 8-byte WRITE posted and its completion polled,
// between two QPs of the test device: on a kernel device, what the cgo calls add to the
// device's own latency (compare with GOVERBS_TEST_DEVICE=sw0, and with perftest's
// ib_write_lat on the same device). Run it on a quiet machine; it skips without a device.
func BenchmarkRCWrite8PostPoll(b *testing.B) {
	e := setup(b)
	p := e.pair(b, verbs.QPTypeRC)
	src := e.mr(b, 64, allAccess)
	dst := e.mr(b, 64, allAccess)
	wcs := make([]verbs.WC, 4)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			b.Fatal(err)
		}
		for {
			n, err := p.acq.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			if n > 0 {
				if wcs[0].Status != verbs.WCSuccess {
					b.Fatalf("completion %v", wcs[0].Status)
				}
				break
			}
		}
	}
}

// BenchmarkRCWrite8PostList64 posts 64 unsignaled WRITEs and a signaled one per list (one
// cgo call for the list) and polls the one completion: the batched data path.
func BenchmarkRCWrite8PostList64(b *testing.B) {
	e := setup(b)
	p := e.pair(b, verbs.QPTypeRC)
	src := e.mr(b, 64, allAccess)
	dst := e.mr(b, 64, allAccess)
	wrs := make([]verbs.SendWR, 64)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite,
			SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	}
	wrs[len(wrs)-1].Flags = verbs.SendSignaled
	wcs := make([]verbs.WC, 4)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.a.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		for {
			n, err := p.acq.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			if n > 0 {
				break
			}
		}
	}
	b.SetBytes(int64(8 * len(wrs)))
}
