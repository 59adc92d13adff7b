package engine_test

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The two-process XRC test: this test binary, run again with xrcChildEnv set, is the
// second process, whose XRC_SEND QPs deliver into the parent's XRC SRQ. The two talk over
// the child's stdin and stdout: the child prints its GID and QP numbers, the parent
// answers with its XRC_RECV QPs' numbers and the SRQ number.
const xrcChildEnv = "GOVERBS_TEST_XRC_CHILD"

const xrcPerQP = 20 // messages each XRC_SEND QP sends

// TestXRCTwoProcesses: four XRC_SEND QPs, two in this process and two in another, send
// into one XRC SRQ through four XRC_RECV QPs of one domain; every message lands, each
// completion names the XRC_RECV QP it came through.
func TestXRCTwoProcesses(t *testing.T) {
	if os.Getenv(xrcChildEnv) != "" {
		t.Skip("the child runs TestXRCSenderProcess")
	}
	tg, a := newHost(t), newHost(t)
	x := newXRCTarget(t, tg, openXRCD(t, tg))
	dst := tg.MR(t, 64*4*xrcPerQP, allAccess)
	for i := range 4 * xrcPerQP {
		if err := x.srq.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(64*i, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestXRCSenderProcess$", "-test.v")
	cmd.Env = append(os.Environ(), xrcChildEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var gidText string
	var childQPN [2]uint32
	in := bufio.NewReader(stdout)
	for { // past go test's own lines
		line, err := in.ReadString('\n')
		if err != nil {
			t.Fatalf("child's QPs: %v", err)
		}
		if _, err := fmt.Sscanf(line, "xrc-child %s %d %d\n", &gidText, &childQPN[0], &childQPN[1]); err == nil {
			break
		}
	}
	childGID := verbs.GIDFromAddr(netip.MustParseAddr(gidText))
	var tgts [4]*verbs.QP
	var inis [2]*verbs.QP
	for i := range 2 {
		inis[i], tgts[i] = xrcLink(t, a, tg, x.xrcd)
		tgt, err := x.xrcd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCRecv})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tgt.Close() })
		connect(t, tgt, defaultRC(), childGID, childQPN[i], 0x200, 0x10)
		tgts[2+i] = tgt
	}
	fmt.Fprintf(stdin, "%s %d %d %d\n", tg.GID.Addr(), tgts[2].QPN(), tgts[3].QPN(), x.num)
	src := a.MR(t, 64, allAccess)
	for _, ini := range inis {
		for i := range xrcPerQP {
			if err := ini.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 64)},
				RemoteSRQN: x.num, Flags: verbs.SendSignaled}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitWC(t, a.CQ, 2*xrcPerQP, 10*time.Second)
	byQP := map[uint32]int{}
	for _, wc := range waitWC(t, x.cq, 4*xrcPerQP, 20*time.Second) {
		if wc.Status != verbs.WCSuccess || wc.ByteLen != 64 {
			t.Fatalf("completion %+v", wc)
		}
		byQP[wc.QPN]++
	}
	for i, q := range tgts {
		if byQP[q.QPN()] != xrcPerQP {
			t.Errorf("XRC_RECV QP %d (%#x): %d messages, want %d", i, q.QPN(), byQP[q.QPN()], xrcPerQP)
		}
	}
	stdin.Close() // the child's cue to exit
	out, _ := io.ReadAll(in)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestXRCSenderProcess is the child of TestXRCTwoProcesses; alone it skips.
func TestXRCSenderProcess(t *testing.T) {
	if os.Getenv(xrcChildEnv) == "" {
		t.Skip("run by TestXRCTwoProcesses")
	}
	h := newHost(t)
	var inis [2]*verbs.QP
	for i := range inis {
		q, err := h.PD.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: h.CQ,
			Cap: verbs.QPCap{MaxSendWR: xrcPerQP, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		inis[i] = q
	}
	fmt.Printf("xrc-child %s %d %d\n", h.GID.Addr(), inis[0].QPN(), inis[1].QPN())
	var gidText string
	var tgt [2]uint32
	var srqn uint32
	in := bufio.NewReader(os.Stdin)
	if _, err := fmt.Fscanf(in, "%s %d %d %d\n", &gidText, &tgt[0], &tgt[1], &srqn); err != nil {
		t.Fatal(err)
	}
	gid := verbs.GIDFromAddr(netip.MustParseAddr(gidText))
	src := h.MR(t, 64, allAccess)
	for i, ini := range inis {
		connect(t, ini, defaultRC(), gid, tgt[i], 0x10, 0x200)
		for k := range xrcPerQP {
			if err := ini.PostSend(verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.SGE(0, 64)},
				RemoteSRQN: srqn, Flags: verbs.SendSignaled}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, wc := range waitWC(t, h.CQ, 2*xrcPerQP, 20*time.Second) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
	}
	io.Copy(io.Discard, in) // stay up, and answer retransmissions, until the parent is done
}
