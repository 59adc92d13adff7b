//go:build linux

package attach_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/attach"
)

// TestXRCAttached: XRC through the verbs API on an attached device: an XRC_SEND QP of one
// process's worth of objects delivers into another's XRC SRQ through an XRC_RECV QP of
// its domain, named by the SRQ's number; the domain is shared by whoever opens its file,
// and a file without one is EAGAIN, as ibv_open_xrcd answers.
func TestXRCAttached(t *testing.T) {
	// Domains shared by file across processes are the daemon's engine's; a client with
	// an engine of its own shares them within its process only, as an in-process device.
	t.Setenv(attach.EnvOwnEngine, "0")
	_, addr := daemon(t)
	cfg := verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true}
	a, b := softtest.NewHostCfg(t, testaddr.Attach, cfg), softtest.NewHostCfg(t, testaddr.Attach, cfg)
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	file := open("xrc_domain")
	xb, err := b.Dev.OpenXRCD(int(file.Fd()), os.O_CREATE)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Dev.OpenXRCD(int(open("none").Fd()), 0); !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("OpenXRCD of a file without a domain: %v, want EAGAIN", err)
	}
	xa, err := a.Dev.OpenXRCD(int(open("xrc_domain").Fd()), 0) // b's domain, through the file
	if err != nil {
		t.Fatalf("OpenXRCD of the file b's domain is on: %v", err)
	}
	defer xa.Close()

	mrA := a.MR(t, 1<<16, verbs.AccessLocalWrite)
	mrB := b.MR(t, 1<<16, verbs.AccessLocalWrite)
	copy(mrA.Buf(), "to an XRC SRQ of another process")
	srq, err := b.PD.CreateSRQEx(verbs.SRQInitEx{Type: verbs.SRQTypeXRC, Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}, XRCD: xb, CQ: b.RCQ})
	if err != nil {
		t.Fatal(err)
	}
	num, err := srq.Num()
	if err != nil || num == 0 {
		t.Fatalf("SRQ number %d, %v", num, err)
	}
	if err := xb.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("closing a domain with an SRQ: %v, want ErrBusy", err)
	}
	tgt, err := xb.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	ini, err := a.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: a.CQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	p := softtest.DefaultRC()
	softtest.Connect(t, ini, p, b.GID, tgt.QPN(), 1, 1)
	softtest.Connect(t, tgt, p, a.GID, ini.QPN(), 1, 1)
	if err := srq.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mrB.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := ini.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mrA.SGE(0, 32)},
		RemoteSRQN: num}); err != nil {
		t.Fatal(err)
	}
	softtest.ExpectStatus(t, a.CQ, 2, verbs.WCSuccess)
	wc := softtest.ExpectStatus(t, b.RCQ, 1, verbs.WCSuccess)
	if wc.QPN != tgt.QPN() || !bytes.Equal(mrB.Buf()[:32], mrA.Buf()[:32]) {
		t.Fatalf("XRC receive: %+v %q", wc, mrB.Buf()[:32])
	}
	// A request naming no SRQ of the domain is NAKed: the sender sees REM_INV_REQ.
	if err := ini.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mrA.SGE(0, 8)},
		RemoteSRQN: num + 1000}); err != nil {
		t.Fatal(err)
	}
	softtest.ExpectStatus(t, a.CQ, 3, verbs.WCRemInvReqErr)
}
