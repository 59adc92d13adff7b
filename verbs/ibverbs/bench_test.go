//go:build ibverbs

package ibverbs_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// BenchmarkRCWrite8PostPoll is one signaled 8-byte WRITE posted and its completion polled,
// between two QPs of the test device: on a kernel device, what the cgo calls add to the
// device's own latency (compare with GOVERBS_TEST_DEVICE=sw0, and with perftest's
// ib_write_lat on the same device). Run it on a quiet machine; it skips without a device.
func BenchmarkRCWrite8PostPoll(b *testing.B) {
	p, wr := setup(b).write8(b)
	wcs := make([]verbs.WC, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.a.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if err := pollOne(p.acq, wcs, time.Now().Add(waitFor)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRCWrite8PostList64 posts 64 unsignaled WRITEs and a signaled one per list (one
// cgo call for the list) and polls the one completion: the batched data path.
func BenchmarkRCWrite8PostList64(b *testing.B) {
	p, wr := setup(b).write8(b)
	wrs := make([]verbs.SendWR, 64)
	for i := range wrs {
		wrs[i] = wr
		wrs[i].ID, wrs[i].Flags = uint64(i), 0
	}
	wrs[len(wrs)-1].Flags = verbs.SendSignaled
	wcs := make([]verbs.WC, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.a.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		if err := pollOne(p.acq, wcs, time.Now().Add(waitFor)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(8 * len(wrs)))
}
