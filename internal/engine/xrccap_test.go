package engine_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// TestXRCSessionCapture records an XRC session with every operation, multi-packet ones
// among them, from the initiator's side, and checks it as a strict receiver and a second
// decoder would (softtest.CheckXRCCapture), each request's XRCETH naming the target's SRQ.
func TestXRCSessionCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xrc.pcap")
	w, err := pcap.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	a := newHostCfg(t, verbs.SoftConfig{Recorder: w})
	tg := newHost(t)
	x := newXRCTarget(t, tg, openXRCD(t, tg))
	ini, _ := xrcLink(t, a, tg, x.xrcd)
	src, dst := a.MR(t, 8192, allAccess), tg.MR(t, 8192, allAccess)
	fill(src.Buf(), 1)
	for i := range 3 {
		if err := x.srq.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(0, 8192)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := x.num
	wrs := []verbs.SendWR{
		{Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 3000)}, RemoteSRQN: r},
		{Opcode: verbs.WRSendWithImm, Imm: 5, SGL: []verbs.SGE{src.SGE(0, 100)}, RemoteSRQN: r},
		{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{src.SGE(0, 5000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: r},
		{Opcode: verbs.WRRDMAWriteWithImm, Imm: 6, SGL: []verbs.SGE{src.SGE(0, 1024)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: r},
		{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{src.SGE(0, 4000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), RemoteSRQN: r},
		{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{src.SGE(0, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), CompareAdd: 1, RemoteSRQN: r},
		{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{src.SGE(8, 8)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), CompareAdd: 1, Swap: 2, RemoteSRQN: r},
	}
	for i := range wrs {
		wrs[i].ID = uint64(i)
		wrs[i].Flags = verbs.SendSignaled
	}
	if err := ini.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
	for _, wc := range waitWC(t, a.CQ, len(wrs), 5*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	waitWC(t, x.cq, 3, 5*time.Second)
	time.Sleep(20 * time.Millisecond) // the last ACK
	a.Dev.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	c := softtest.CheckXRCCapture(t, path)
	for _, n := range c.SRQNs {
		if n != r {
			t.Fatalf("a request's XRCETH names SRQ %#x, not %#x", n, r)
		}
	}
	for _, op := range []wire.Opcode{wire.XRCSendFirst, wire.XRCSendLast, wire.XRCSendOnlyImm, wire.XRCWriteFirst,
		wire.XRCWriteMiddle, wire.XRCWriteLast, wire.XRCWriteOnlyImm, wire.XRCReadRequest, wire.XRCReadResponseFirst,
		wire.XRCReadResponseLast, wire.XRCFetchAdd, wire.XRCCompareSwap, wire.XRCAtomicAck, wire.XRCAck} {
		if c.Opcodes[op] == 0 {
			t.Errorf("capture has no %v packet (saw %v)", op, c.Opcodes)
		}
	}
}
