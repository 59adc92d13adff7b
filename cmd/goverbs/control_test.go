package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// TestStatCommand: goverbs stat shows a running tool's device and QP counters, found
// by the device's address or by listing every running tool; an address not given
// with --bind is refused.
func TestStatCommand(t *testing.T) {
	a, _ := addrPair(t)
	srv := startServer(t, "local address:", "rc_pingpong", "--bind", a, "-p", freePort(t, a))
	defer srv.cancel()
	r := runBin(t, 10*time.Second, "stat", "--bind", a)
	mustSucceed(t, "stat --bind", r)
	mustContain(t, "stat --bind", r.stdout, "# goverbs rc_pingpong (pid ", "): device sw0 on "+a+"\n",
		"\nlink sw0/1 sent_pkts 0 ", " rcvd_icrc_err 0 ")
	mustMatch(t, "stat --bind", r.stdout, `(?m)^qp 0x[0-9a-f]+ tx_pkts 0 rx_pkts 0 `)
	r = runBin(t, 10*time.Second, "stat")
	mustSucceed(t, "stat", r)
	mustContain(t, "stat", r.stdout, "device sw0 on "+a+"\n")
	badInput(t, "no goverbs tool runs a device on 127.0.99.99", "stat", "--bind", "127.0.99.99")
	// The address goes after --bind: given bare, it was ignored, and stat showed every
	// tool and asyncwatch whichever one ran.
	badInput(t, `unexpected argument "`+a+`"`, "stat", a)
	badInput(t, `unexpected argument "`+a+`"`, "asyncwatch", a)
}

// TestAsyncwatch: goverbs asyncwatch prints a running device's async events as rdma-core's
// asyncwatch does. The device runs in this test process, serving its socket as every tool
// does; an RC QP left in RTR raises COMM_EST when its first packet arrives.
func TestAsyncwatch(t *testing.T) {
	a, b := addrPair(t)
	ea, err := tool.OpenEndpoint(tool.DevOpts{Bind: a, IBPort: 1, Tool: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := tool.OpenEndpoint(tool.DevOpts{Bind: b, IBPort: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	w := startServer(t, "async events of", "asyncwatch", "--bind", a)

	qa, qb, mra, mrb := rcPair(t, ea, eb)
	if err := qa.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mra.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := qb.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mrb.SGE(0, 8)}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	want := fmt.Sprintf("  event_type IBV_EVENT_COMM_EST (4), port 0, QP 0x%06x\n", qa.QPN())
	for {
		w.mu.Lock()
		out := w.out.String()
		w.mu.Unlock()
		if strings.Contains(out, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("asyncwatch printed no COMM_EST:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ea.Close() // the tool ends: asyncwatch says so and exits 0
	r := w.wait(t)
	mustSucceed(t, "asyncwatch", r)
	mustContain(t, "asyncwatch", r.stdout, "async events of goverbs test (pid ", "the tool closed its device\n")
}

// rcPair connects an RC QP on ea (left in RTR) to one on eb (in RTS).
func rcPair(t *testing.T, ea, eb *tool.Endpoint) (*verbs.QP, *verbs.QP, *verbs.MR, *verbs.MR) {
	t.Helper()
	mk := func(ep *tool.Endpoint) (*verbs.QP, *verbs.MR) {
		pd, err := ep.Dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		cq, err := ep.Dev.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessLocalWrite},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		return qp, mr
	}
	qa, mra := mk(ea)
	qb, mrb := mk(eb)
	rtr := func(qp *verbs.QP, remote *verbs.QP, gid verbs.GID) {
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: remote.QPN(), RQPSN: 0,
			AH: verbs.AHAttr{DGID: gid, HopLimit: 64, Port: 1}, MaxDestRdAtomic: 1, MinRNRTimer: 12},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
	}
	rtr(qa, qb, eb.GID)
	rtr(qb, qa, ea.GID)
	if err := qb.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
	return qa, qb, mra, mrb
}
