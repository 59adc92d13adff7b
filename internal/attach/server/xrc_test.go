//go:build linux

package server_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/attach/attachtest"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// openXRCD sends OPEN_XRCD with oflags and the descriptors fds (none: a domain of the
// client's own).
func (r *raw) openXRCD(oflags int, fds ...int) (uint32, int32) {
	r.t.Helper()
	rd, got, errno := r.call(attach.OpOpenXRCD, func(w *attach.Writer) { w.U32(uint32(oflags)) }, fds...)
	shm.CloseFDs(got)
	return rd.U32(), errno
}

// xrcSRQ sends CREATE_XRC_SRQ and returns the SRQ's handle and number.
func (r *raw) xrcSRQ(pd, xrcd, cq uint32) (h, num uint32, errno int32) {
	r.t.Helper()
	rd, fds, errno := r.call(attach.OpCreateXRCSRQ, func(w *attach.Writer) {
		w.U32(pd)
		w.U32(xrcd)
		w.U32(cq)
		w.U32(16)
		w.U32(1)
		w.U32(0)
	})
	shm.CloseFDs(fds)
	if errno != 0 {
		return 0, 0, errno
	}
	h = rd.U32()
	for range 4 {
		rd.U32()
	}
	return h, rd.U32(), 0
}

func (r *raw) simple(op attach.Op, h uint32) int32 {
	r.t.Helper()
	_, fds, errno := r.call(op, func(w *attach.Writer) { w.U32(h) })
	shm.CloseFDs(fds)
	return errno
}

// createQP sends CREATE_QP of type typ with cq as both CQs, and returns the errno.
func (r *raw) createQP(pd uint32, typ driver.QPType, cq uint32) int32 {
	r.t.Helper()
	_, fds, errno := r.call(attach.OpCreateQP, createQPMsg(pd, typ, cq, driver.QPCap{MaxSendWR: 4, MaxSendSGE: 1}))
	shm.CloseFDs(fds)
	return errno
}

func (r *raw) pdAndCQ() (pd, cq uint32) {
	r.t.Helper()
	rd, _ := r.must(attach.OpAllocPD, nil)
	pd = rd.U32()
	rd, fds := r.must(attach.OpCreateCQ, func(w *attach.Writer) { w.U32(16) })
	shm.CloseFDs(fds)
	return pd, rd.U32()
}

func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestHostileXRC: the XRC commands take only the client's own handles, share a domain
// only between clients holding the same file, refuse what a kernel device refuses,
// and a dead client's XRC objects go with it.
func TestHostileXRC(t *testing.T) {
	_, addr := daemon(t)
	dir := t.TempDir()
	fileA := openFile(t, filepath.Join(dir, "xrc_domain"))
	fileB := openFile(t, filepath.Join(dir, "other"))
	fd := func(f *os.File) int { return int(f.Fd()) }
	const einval, eagain, ebusy = int32(syscall.EINVAL), int32(syscall.EAGAIN), int32(syscall.EBUSY)

	a := dialRaw(t, addr)
	pdA, cqA := a.pdAndCQ()
	xa, errno := a.openXRCD(os.O_CREATE, fd(fileA))
	if errno != 0 {
		t.Fatalf("OPEN_XRCD O_CREAT: errno %d", errno)
	}
	srqA, numA, errno := a.xrcSRQ(pdA, xa, cqA)
	if errno != 0 || numA == 0 {
		t.Fatalf("CREATE_XRC_SRQ: errno %d, number %d", errno, numA)
	}

	// Wrong handles and framing.
	for name, got := range map[string]int32{
		"SRQ with a PD as domain":    func() int32 { _, _, e := a.xrcSRQ(pdA, pdA, cqA); return e }(),
		"SRQ with a domain as CQ":    func() int32 { _, _, e := a.xrcSRQ(pdA, xa, xa); return e }(),
		"SRQ with handle 0":          func() int32 { _, _, e := a.xrcSRQ(pdA, 0, cqA); return e }(),
		"recv QP of a CQ":            a.simple(attach.OpCreateXRCRecvQP, cqA),
		"close of an SRQ as domain":  a.simple(attach.OpCloseXRCD, srqA),
		"short OPEN_XRCD":            func() int32 { _, _, e := a.call(attach.OpOpenXRCD, nil); return e }(),
		"OPEN_XRCD with two files":   func() int32 { _, e := a.openXRCD(os.O_CREATE, fd(fileA), fd(fileB)); return e }(),
		"XRC_RECV by CREATE_QP":      a.createQP(pdA, driver.QPTypeXRCRecv, cqA),
		"XRC_SEND with a receive CQ": a.createQP(pdA, driver.QPTypeXRCSend, cqA),
	} {
		if got != einval {
			t.Errorf("%s: errno %d, want EINVAL", name, got)
		}
	}
	// The kernel's answers for a file's domain, and what is still in use.
	if _, e := a.openXRCD(0, fd(fileB)); e != eagain {
		t.Errorf("OPEN_XRCD of a file with no domain, no O_CREAT: errno %d, want EAGAIN", e)
	}
	if _, e := a.openXRCD(os.O_CREATE|os.O_EXCL, fd(fileA)); e != einval {
		t.Errorf("OPEN_XRCD O_EXCL of a file with a domain: errno %d, want EINVAL", e)
	}
	if path, err := unix.Open(fileA.Name(), unix.O_PATH|unix.O_CLOEXEC, 0); err != nil {
		t.Error(err)
	} else {
		if _, e := a.openXRCD(os.O_CREATE, path); e != int32(syscall.EBADF) {
			t.Errorf("OPEN_XRCD of an O_PATH descriptor: errno %d, want EBADF", e)
		}
		unix.Close(path)
	}
	if e := a.simple(attach.OpCloseXRCD, xa); e != ebusy {
		t.Errorf("CLOSE_XRCD with an SRQ: errno %d, want EBUSY", e)
	}
	if e := a.simple(attach.OpDestroyCQ, cqA); e != ebusy {
		t.Errorf("DESTROY_CQ of an XRC SRQ's CQ: errno %d, want EBUSY", e)
	}

	// Another client names none of a's objects, but shares the domain through the file.
	b := dialRaw(t, addr)
	pdB, cqB := b.pdAndCQ()
	if _, _, e := b.xrcSRQ(pdB, xa, cqB); e != einval {
		t.Errorf("CREATE_XRC_SRQ with another client's domain: errno %d, want EINVAL", e)
	}
	for _, h := range []uint32{xa, srqA, 1000} {
		if e := b.simple(attach.OpCloseXRCD, h); e != einval {
			t.Errorf("CLOSE_XRCD of handle %d not b's: errno %d, want EINVAL", h, e)
		}
	}
	// A separately opened descriptor of a's file, as another process has.
	sameA, err := os.Open(fileA.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer sameA.Close()
	xb, e := b.openXRCD(0, fd(sameA))
	if e != 0 {
		t.Fatalf("OPEN_XRCD of a file a's domain is on, without O_CREAT: errno %d", e)
	}
	rd, _ := b.must(attach.OpCreateXRCRecvQP, func(w *attach.Writer) { w.U32(xb) })
	rd.U32()
	if qpn := rd.U32(); qpn == 0 {
		t.Error("XRC_RECV QP without a number")
	} else if st := statOf(t, addr); !strings.Contains(st, fmt.Sprintf("qp %#x pid ", qpn)) {
		t.Errorf("goverbs stat lacks the XRC_RECV QP %#x:\n%s", qpn, st)
	}
	if e := b.simple(attach.OpDestroyQP, 0); e != einval {
		t.Errorf("DESTROY_QP 0: errno %d", e)
	}

	// a leaves: its domain's open goes, b's keeps the domain.
	a.c.Close()
	time.Sleep(100 * time.Millisecond)
	c := dialRaw(t, addr)
	xc, e := c.openXRCD(0, fd(fileA))
	if e != 0 {
		t.Fatalf("the domain went with a while b holds it open: errno %d", e)
	}
	if e := c.simple(attach.OpCloseXRCD, xc); e != 0 {
		t.Fatalf("CLOSE_XRCD: errno %d", e)
	}
	// b leaves too: the domain is gone.
	b.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		x, e := c.openXRCD(0, fd(fileA))
		if e == eagain {
			break
		}
		if e == 0 {
			c.simple(attach.OpCloseXRCD, x) // b's teardown has not run yet
		}
		if time.Now().After(deadline) {
			t.Fatalf("the domain outlived its last client (errno %d)", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// statOf is what the daemon answers `goverbs stat` for its device on addr.
func statOf(t *testing.T, addr netip.Addr) string { return attachtest.Stat(t, addr) }
