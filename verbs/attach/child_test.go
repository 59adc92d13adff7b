//go:build linux

package attach_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// child is a process the tests start: it attaches to the daemon at ATTACH_ADDR, makes
// an RC QP, prints "qpn N rkey R addr A", reads its peer's line from stdin, connects,
// and runs its part (mode): ping or pong (ATTACH_ITERS round trips of 64-byte SENDs,
// then "ok", and stays until stdin closes), writer (64 KiB WRITEs to the peer until one fails: "peer gone STATUS")
// or sink (waits to be killed).
func child(mode string) int {
	if err := runChild(mode); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

func runChild(mode string) error {
	addr := netip.MustParseAddr(os.Getenv("ATTACH_ADDR"))
	iters, _ := strconv.Atoi(os.Getenv("ATTACH_ITERS"))
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	if os.Getenv("ATTACH_EVENTS") != "" {
		childChannel = dev.CreateCompChannel()
	}
	cq, err := dev.CreateCQ(256, childChannel)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<17) // large: pages of its own
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return err
	}
	fmt.Printf("qpn %d rkey %d addr %d\n", qp.QPN(), mr.RKey(), mr.Addr())
	var pqpn, prkey uint32
	var paddr uint64
	in := bufio.NewReader(os.Stdin)
	if _, err := fmt.Fscanf(in, "qpn %d rkey %d addr %d\n", &pqpn, &prkey, &paddr); err != nil {
		return fmt.Errorf("peer line: %v", err)
	}
	gid, _ := dev.QueryGID(1, 0)
	if p := os.Getenv("ATTACH_PEER"); p != "" { // a peer on another address
		gid = verbs.GIDFromAddr(netip.MustParseAddr(p))
	}
	timeout, retry := uint8(14), uint8(7)
	if mode == "writer" {
		timeout, retry = 8, 2 // a dead peer is noticed within a few milliseconds
	}
	if err := connect(qp, gid, pqpn, timeout, retry); err != nil {
		return err
	}
	switch mode {
	case "ping", "pong":
		if err := pingPong(qp, cq, mr, buf, mode == "ping", iters); err != nil {
			return err
		}
		// Stay, QP and all, until the test has every child's "ok" (waitOK closes
		// stdin). The side that finishes first has had its last word acknowledged but
		// may not have got its peer's ACK of the peer's last request through: were that
		// ACK lost, the peer's retransmission would meet a QP that no longer exists and
		// its retries would run out (perftest ends with a barrier on its socket for
		// the same reason).
		io.Copy(io.Discard, in)
		return nil
	case "writer":
		return writer(qp, cq, mr, buf, prkey, paddr)
	case "sink":
		time.Sleep(time.Minute)
	}
	return nil
}

func connect(qp *verbs.QP, gid verbs.GID, dest uint32, timeout, retry uint8) error {
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: dest, RQPSN: 1,
		MaxDestRdAtomic: 1, MinRNRTimer: 1, AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
			verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

// childChannel is the child's completion channel with ATTACH_EVENTS.
var childChannel *verbs.CompChannel

// poll waits for one completion, spinning politely, or (ATTACH_EVENTS) blocked on the
// completion channel.
func poll(cq *verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	if ch := childChannel; ch != nil {
		for {
			if n, err := cq.Poll(wc[:]); n == 1 || err != nil {
				return wc[0], err
			}
			cq.RequestNotify(false)
			if n, err := cq.Poll(wc[:]); n == 1 || err != nil {
				return wc[0], err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := ch.Wait(ctx)
			cancel()
			if err != nil {
				return wc[0], err
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return wc[0], err
		}
		if n == 1 {
			return wc[0], nil
		}
		runtime.Gosched()
		if i%1024 == 0 && time.Now().After(deadline) {
			return wc[0], fmt.Errorf("no completion in 10s")
		}
	}
}

func pingPong(qp *verbs.QP, cq *verbs.CQ, mr *verbs.MR, buf []byte, first bool, iters int) error {
	send, recv := mr.SGE(0, 64), mr.SGE(4096, 64)
	postRecv := func() error { return qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{recv}}) }
	if err := postRecv(); err != nil {
		return err
	}
	for i := 0; i < iters; i++ {
		if first || i > 0 {
			buf[0] = byte(i)
			if err := qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{send}}); err != nil {
				return err
			}
		}
		for got := 0; got < 2; {
			if !first && i == 0 && got == 0 {
				got++ // the first turn of the side that answers has no send of its own
			}
			wc, err := poll(cq)
			if err != nil {
				return err
			}
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("iteration %d: %v", i, wc.Status)
			}
			if wc.ID == 2 {
				if err := postRecv(); err != nil {
					return err
				}
			}
			got++
		}
	}
	if !first { // the last word is ours
		if err := qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{send}}); err != nil {
			return err
		}
		if _, err := poll(cq); err != nil {
			return err
		}
	}
	fmt.Println("ok")
	return nil
}

func writer(qp *verbs.QP, cq *verbs.CQ, mr *verbs.MR, buf []byte, rkey uint32, raddr uint64) error {
	for i := 0; ; i++ {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mr.SGE(0, 65536)},
			RemoteAddr: raddr, RKey: rkey}
		if err := qp.PostSend(wr); err != nil {
			return err
		}
		wc, err := poll(cq)
		if err != nil {
			return err
		}
		if wc.Status != verbs.WCSuccess {
			fmt.Println("peer gone", wc.Status)
			return nil
		}
	}
}
