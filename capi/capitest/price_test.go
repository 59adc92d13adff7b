package capitest

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// BenchmarkPostPoll prices the C ABI's data path: a signaled 8-byte RDMA WRITE posted
// and polled to completion, over an RC QP looped back to a second QP of one busy-poll
// device, through the C library (testdata/abi_check.c's bench mode) and through
// package verbs. Compare the ns/op of the two; on a loaded machine only their ratio
// means anything.
func BenchmarkPostPoll(b *testing.B) {
	b.Run("CABI", func(b *testing.B) {
		lib := library(b)
		bin := cProgram(b, lib, "abi_check")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, bin, "bench", strconv.Itoa(max(b.N, 1000)))
		c.Env = append(os.Environ(), onGoverbs(lib, "b0", newAddr())...)
		out, err := c.Output()
		if err != nil {
			b.Fatalf("abi_check bench: %v\n%s", err, out)
		}
		ns, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(string(out), "ns/op")), 64)
		if err != nil {
			b.Fatalf("abi_check bench printed %q", out)
		}
		b.ReportMetric(ns, "ns/post+poll")
	})
	b.Run("GoAPI", func(b *testing.B) {
		addr := netip.MustParseAddr(newAddr())
		dev, err := verbs.OpenSoft(verbs.SoftConfig{Name: "b1", Addr: addr, BusyPoll: true})
		if err != nil {
			b.Fatal(err)
		}
		defer dev.Close()
		pd, _ := dev.AllocPD()
		cq, err := dev.CreateCQ(128, nil)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 8192)
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			b.Fatal(err)
		}
		init := verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}
		qa, err1 := pd.CreateQP(init)
		qb, err2 := pd.CreateQP(init)
		if err1 != nil || err2 != nil {
			b.Fatal(err1, err2)
		}
		gid := verbs.GIDFromAddr(addr)
		for _, p := range [][2]*verbs.QP{{qa, qb}, {qb, qa}} {
			steps := []struct {
				attr verbs.QPAttr
				mask verbs.QPAttrMask
			}{
				{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
					verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
				{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: p[1].QPN(), RQPSN: 100,
					MaxDestRdAtomic: 4, MinRNRTimer: 12, AH: verbs.AHAttr{DGID: gid, HopLimit: 64, Port: 1}},
					verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
						verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
				{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 100, MaxRdAtomic: 4},
					verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
						verbs.QPAttrSQPSN | verbs.QPAttrMaxQPRdAtomic},
			}
			for _, s := range steps {
				if err := p[0].Modify(&s.attr, s.mask); err != nil {
					b.Fatal(err)
				}
			}
		}
		wr := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, 8)}, RemoteAddr: mr.AddrOf(4096), RKey: mr.RKey()}
		wcs := make([]verbs.WC, 1)
		run := func() {
			if err := qa.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			for {
				n, err := cq.Poll(wcs)
				if err != nil || n == 1 && wcs[0].Status != verbs.WCSuccess {
					b.Fatal(err, wcs[0].Status)
				}
				if n == 1 {
					return
				}
			}
		}
		n := max(b.N, 1000)
		for range n/10 + 1 { // warm up, as the C side does
			run()
		}
		start := time.Now()
		for range n {
			run()
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n), "ns/post+poll")
		qa.Close()
		qb.Close()
	})
}

// TestCDataPathAllocations: posting and polling through the C library allocates nothing
// on the Go heap, measured by the library's own count (goverbs_heap_allocs) around
// abi_check's loop of signaled WRITEs. The count is process-wide, and the device's
// goroutines allocate now and then on a loaded machine (a busy device's background
// goroutine each time it waits for the socket, netio's WaitReadable; timers), so the
// best of three runs is taken: a per-post or per-poll allocation shows as 1 or more per
// operation in every run. The WRITEs are posted from registered memory, then inline from
// unregistered memory (which the library stages, capi/inline.c).
func TestCDataPathAllocations(t *testing.T) {
	lib := library(t)
	bin := cProgram(t, lib, "abi_check")
	t.Run("registered", func(t *testing.T) { checkCDataPathAllocations(t, lib, bin) })
	t.Run("inline", func(t *testing.T) { checkCDataPathAllocations(t, lib, bin, "inline") })
}

func checkCDataPathAllocations(t *testing.T, lib, bin string, mode ...string) {
	best := -1.0
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		c := exec.CommandContext(ctx, bin, append([]string{"bench", "2000"}, mode...)...)
		c.Env = append(os.Environ(), append(onGoverbs(lib, "a0", newAddr()), "GOVERBS_BUSY_POLL=0")...)
		out, err := c.Output()
		cancel()
		if err != nil {
			t.Fatalf("abi_check bench: %v\n%s", err, out)
		}
		_, v, ok := strings.Cut(string(out), "allocs/op ")
		if !ok {
			t.Fatalf("abi_check bench printed no allocation count:\n%s", out)
		}
		allocs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			t.Fatalf("abi_check bench printed %q", out)
		}
		if best < 0 || allocs < best {
			best = allocs
		}
		if best == 0 {
			break
		}
	}
	if best > 0.05 {
		t.Errorf("post+poll through the C library: %.4f heap allocations per operation (best of 3), want 0", best)
	}
}
