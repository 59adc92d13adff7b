//go:build ibverbs

package ibverbs_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/verbstest"
)

// suiteEnv is the test device for the suites every provider passes: setup finds it and
// its GID (or skips), and the suites open it afresh. setup's device closes first: a
// software device (GOVERBS_TEST_DEVICE=sw0) cannot be open twice.
func suiteEnv(t *testing.T) verbstest.Env {
	e := setup(t)
	name := e.dev.Name()
	e.dev.Close()
	return verbstest.Env{GIDIndex: e.gidIdx, Open: func(t testing.TB) *verbs.Device {
		dev, err := verbs.Open(name)
		if err != nil {
			t.Fatalf("Open %s: %v", name, err)
		}
		return dev
	}}
}

func TestLifecycle(t *testing.T) { verbstest.TestLifecycle(t, suiteEnv(t)) }

func TestCloseBusy(t *testing.T) { verbstest.TestCloseBusy(t, suiteEnv(t)) }

// TestPostAndPollAllocateNothing: the data path converts in memory the QP and CQ own.
func TestPostAndPollAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p, wr := setup(t).write8(t)
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(waitFor)
	allocs := testing.AllocsPerRun(100, func() {
		if err := p.a.PostSend(wr); err != nil {
			panic(err)
		}
		if err := pollOne(p.acq, wcs, deadline); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post and poll, want 0", allocs)
	}
}

// TestDeviceCloseClosesObjects: Close with objects open releases them, and using one
// afterwards is an error, not a crash.
func TestDeviceCloseClosesObjects(t *testing.T) {
	e := setup(t)
	p := e.pair(t, verbs.QPTypeRC)
	e.mr(t, 4096, allAccess)
	if _, err := e.pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.dev.Close(); err != nil {
		t.Fatalf("Close with objects open: %v", err)
	}
	// The device's context is gone: queries must not reach it, creations fail.
	e.dev.QueryPort(1)
	e.dev.GIDTable(1)
	_, err := e.dev.AllocPD()
	wantErr(t, err, verbs.ErrClosed)
	_, err = e.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	wantErr(t, err, verbs.ErrClosed)
	wantErr(t, p.a.PostSend(verbs.SendWR{Opcode: verbs.WRSend}), verbs.ErrClosed)
	_, err = p.acq.Poll(make([]verbs.WC, 1))
	wantErr(t, err, verbs.ErrClosed)
	if _, ok := <-e.dev.Events(); ok {
		t.Fatal("the event channel is open after Close")
	}
}

func TestCounters(t *testing.T) {
	e := setup(t)
	sum := func() (s uint64) {
		for _, c := range e.dev.Counters() {
			s += c.Value
		}
		return s
	}
	before := sum()
	p := e.pair(t, verbs.QPTypeRC)
	buf := e.mr(t, 64, allAccess)
	for i := range 4 {
		if err := p.a.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{buf.SGE(0, 8)}, RemoteAddr: buf.AddrOf(32), RKey: buf.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	waitWC(t, p.acq, 4)
	// The kernel caches a device's hardware counters for their lifespan (about 10 ms:
	// /sys/class/infiniband/*/ports/*/hw_counters/lifespan, 12 on the rxe VM): a read
	// within it of the first gives the first's values, as it did on rxe0 in 2 runs of 5.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after := sum()
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters sum %d before 4 WRITEs, %d 2 s after: %v", before, after, e.dev.Counters())
		}
	}
}
