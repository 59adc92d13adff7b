//go:build linux

package attach_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/attach/attachtest"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/attach"
)

// Go clients running engines of their own on the daemon's address
// (GOVERBS_ATTACH_ENGINE=1; children inherit the setting).

func ownEngine(t *testing.T, on bool) {
	v := "0"
	if on {
		v = "1"
	}
	t.Setenv(attach.EnvOwnEngine, v)
}

// daemonStat is what the daemon answers goverbs stat for addr.
func daemonStat(t *testing.T, addr netip.Addr) string { return attachtest.Stat(t, addr) }

// TestOwnEngine: a Go client that asks for its own engine gets one: its QPs are
// numbered in a range of its own (not the daemon's engine's 0x11-0xffff), the daemon
// lists the process with that range, and the range is gone from the listing with the
// process's device. Without the setting the client is served by the daemon's engine.
func TestOwnEngine(t *testing.T) {
	_, addr := daemon(t)
	qpn := func(dev *verbs.Device) uint32 {
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(4, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return qp.QPN()
	}
	ownEngine(t, true)
	dev := attachTo(t, addr)
	if !attach.OwnEngine(dev.Commander()) {
		t.Fatal("GOVERBS_ATTACH_ENGINE=1: the device is the daemon's engine's")
	}
	if _, err := dev.OpenGSI(); err == nil {
		t.Error("OpenGSI on a client's own engine: QP1 is the daemon's")
	}
	n := qpn(dev)
	if n>>16 == 0 || n>>16 == 0xff {
		t.Fatalf("own engine's QPN %#x in the daemon's range", n)
	}
	st := daemonStat(t, addr)
	want := fmt.Sprintf("own_engine qpn %#06x-%#06x", n&^0xffff, n|0xffff)
	if !strings.Contains(st, want) {
		t.Fatalf("daemon's stat lacks %q:\n%s", want, st)
	}
	dev.Close()
	ownEngine(t, false)
	dev = attachTo(t, addr)
	defer dev.Close()
	if attach.OwnEngine(dev.Commander()) {
		t.Fatal("GOVERBS_ATTACH_ENGINE=0: the device has an engine of its own")
	}
	if n := qpn(dev); n < 0x11 || n > 0xffff {
		t.Fatalf("the daemon's engine's QPN %#x outside 0x11-0xffff", n)
	}
	if strings.Contains(daemonStat(t, addr), "own_engine") {
		t.Fatal("the closed client's range still listed")
	}
}

// Two, then eight, processes with their own engines on one address, each pair
// ping-ponging over RC at once.
func TestOwnEngineTwoProcesses(t *testing.T)   { ownEngine(t, true); testPingPongs(t, 1) }
func TestOwnEngineEightProcesses(t *testing.T) { ownEngine(t, true); testPingPongs(t, 4) }

// TestOwnEngineMixed: processes with their own engines and processes on the daemon's
// engine, on one address, ping-pong with each other (both ways round).
func TestOwnEngineMixed(t *testing.T) {
	_, addr := daemon(t)
	var ps [][2]*kid
	for _, first := range []bool{true, false} {
		ownEngine(t, first)
		a := startKid(t, addr, "ping", 500)
		ownEngine(t, !first)
		b := startKid(t, addr, "pong", 500)
		ps = append(ps, [2]*kid{a, b})
	}
	for _, p := range ps {
		for _, k := range p {
			k.qpnLine(t)
		}
		introduce(p)
	}
	waitOK(t, ps)
}

// TestOwnEngineKilled: a process with its own engine is killed while its peer
// streams WRITEs to it; its QPNs fall to the daemon's engine, which has no such QP, so
// the peer's retries run out. The killed process's socket was not the last of the
// daemon's group, so the kernel moved the last one (a process that joined after it)
// into its place: that process and its peer, which start their ping-pong only after
// the kill, must still get their datagrams, as must a process that joins after.
func TestOwnEngineKilled(t *testing.T) {
	ownEngine(t, true)
	_, addr := daemon(t)
	stream := pairKids(t, addr, 1, "writer", "sink", 0)[0]
	pp := [2]*kid{startKid(t, addr, "ping", 300), startKid(t, addr, "pong", 300)}
	for _, k := range pp {
		k.qpnLine(t)
	}
	time.Sleep(100 * time.Millisecond)
	stream[1].cmd.Process.Kill()
	if l := stream[0].readLine(t, 20*time.Second); !strings.HasPrefix(l, "peer gone") {
		t.Fatalf("writer: %q, want its QP to fail with retries exhausted", l)
	}
	stream[0].cmd.Process.Kill()
	late := pairKids(t, addr, 1, "ping", "pong", 300)[0]
	introduce(pp)
	waitOK(t, [][2]*kid{pp, late})
}

// TestOwnEngineInProcessPeer: a process with its own engine on the daemon's address
// ping-pongs with an in-process device on another address.
func TestOwnEngineInProcessPeer(t *testing.T) {
	_, addr := daemon(t)
	peer := testaddr.Open(t, testaddr.Attach, func(a netip.Addr) (*verbs.Device, error) {
		return verbs.OpenSoft(verbs.SoftConfig{Name: "sw1", Addr: a})
	})
	defer peer.Close()
	pgid, _ := peer.QueryGID(1, 0)
	ownEngine(t, true)
	t.Setenv("ATTACH_PEER", pgid.Addr().String())
	k := startKid(t, addr, "ping", 500)
	k.line = k.readLine(t, 20*time.Second)
	var kqpn, krkey uint32
	var kaddr uint64
	if _, err := fmt.Sscanf(k.line, "qpn %d rkey %d addr %d", &kqpn, &krkey, &kaddr); err != nil {
		t.Fatalf("child: %q", k.line)
	}
	if kqpn>>16 == 0 {
		t.Fatalf("child's QPN %#x is the daemon's engine's", kqpn)
	}
	pd, err := peer.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := peer.CreateCQ(256, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<17)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(k.in, "qpn %d rkey %d addr %d\n", qp.QPN(), mr.RKey(), mr.Addr())
	if err := connect(qp, verbs.GIDFromAddr(addr), kqpn, 14, 7); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pingPong(qp, cq, mr, buf, false, 500) }()
	if l := k.readLine(t, 30*time.Second); l != "ok" {
		t.Fatalf("child: %q", l)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
