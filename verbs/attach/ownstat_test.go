//go:build linux

package attach_test

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/attach"
)

// TestOwnEngineStat: the daemon's stat lists a client's own engine's counters and its
// QPs with their counters (issue 27), under the client's line, and a client that hung
// up its stat socket gets a line saying so while the rest of the listing stays.
func TestOwnEngineStat(t *testing.T) {
	_, addr := daemon(t)
	ownEngine(t, true)
	dev := attachTo(t, addr)
	defer dev.Close()
	if !attach.OwnEngine(dev.Commander()) {
		t.Fatal("GOVERBS_ATTACH_ENGINE=1: the device is the daemon's engine's")
	}
	peer := testaddr.Open(t, testaddr.Attach, func(a netip.Addr) (*verbs.Device, error) {
		return verbs.OpenSoft(verbs.SoftConfig{Name: "sw1", Addr: a})
	})
	defer peer.Close()
	type end struct {
		qp  *verbs.QP
		cq  *verbs.CQ
		mr  *verbs.MR
		gid verbs.GID
	}
	mk := func(d *verbs.Device) end {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(64, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		gid, err := d.QueryGID(1, 0)
		if err != nil {
			t.Fatal(err)
		}
		return end{qp, cq, mr, gid}
	}
	a, b := mk(dev), mk(peer)
	if err := connect(a.qp, b.gid, b.qp.QPN(), 14, 7); err != nil {
		t.Fatal(err)
	}
	if err := connect(b.qp, a.gid, a.qp.QPN(), 14, 7); err != nil {
		t.Fatal(err)
	}
	const n = 8
	for range n {
		if err := b.qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []end{a, b} {
		for range n {
			if wc, err := poll(e.cq); err != nil || wc.Status != verbs.WCSuccess {
				t.Fatalf("completion: %v %v", wc.Status, err)
			}
		}
	}

	pid := os.Getpid()
	st := daemonStat(t, addr)
	t.Logf("daemon's stat:\n%s", st)
	client := regexp.MustCompile(fmt.Sprintf(`(?m)^client pid %d \S+ own_engine qpn %#06x-%#06x$`, pid, a.qp.QPN()&^0xffff, a.qp.QPN()|0xffff))
	engine := regexp.MustCompile(fmt.Sprintf(`(?m)^engine pid %d .*\bsent_pkts ([0-9]+)`, pid))
	qp := regexp.MustCompile(fmt.Sprintf(`(?m)^qp %#x pid %d tx_pkts ([0-9]+) rx_pkts ([0-9]+) retransmits`, a.qp.QPN(), pid))
	ci, ei, qi := client.FindStringIndex(st), engine.FindStringSubmatchIndex(st), qp.FindStringSubmatchIndex(st)
	if ci == nil || ei == nil || qi == nil || !(ci[0] < ei[0] && ei[0] < qi[0]) {
		t.Fatalf("daemon's stat lacks the client's line, then its engine's, then its QP %#x's:\n%s", a.qp.QPN(), st)
	}
	num := func(m []int, i int) uint64 {
		v, _ := strconv.ParseUint(st[m[2*i]:m[2*i+1]], 10, 64)
		return v
	}
	if num(ei, 1) < n || num(qi, 1) < n || num(qi, 2) == 0 {
		t.Fatalf("counters: engine sent_pkts %d, qp tx_pkts %d rx_pkts %d; want >= %d, >= %d, > 0:\n%s",
			num(ei, 1), num(qi, 1), num(qi, 2), n, n, st)
	}

	attach.HangUpStat(dev.Commander())
	st = daemonStat(t, addr)
	t.Logf("daemon's stat after the hang-up:\n%s", st)
	if !client.MatchString(st) || !regexp.MustCompile(fmt.Sprintf(`(?m)^# pid %d: the client's engine's stat socket`, pid)).MatchString(st) ||
		!regexp.MustCompile(`(?m)^link \S+/1 `).MatchString(st) {
		t.Fatalf("after the client hung up its stat socket, the daemon's stat:\n%s", st)
	}
	if qp.MatchString(st) {
		t.Fatalf("QP listed with no answer from the client:\n%s", st)
	}
}
