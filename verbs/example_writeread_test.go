package verbs_test

import (
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// node is one side of the connection: a device with a PD, a CQ, a QP and a registered
// buffer.
type node struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

// openNode opens a software device on addr and creates an RC QP and a 64-byte buffer
// that a peer may write and read.
func openNode(addr string) (*node, error) {
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		return nil, err
	}
	n := &node{dev: dev}
	if n.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if n.cq, err = dev.CreateCQ(16, nil); err != nil {
		return nil, err
	}
	n.qp, err = n.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	n.mr, err = n.pd.RegMR(make([]byte, 64), access)
	return n, err
}

// connectTo brings the QP from RESET through INIT and RTR to RTS, towards the peer's QP.
// Two programs would exchange the QPN and GID out of band first (rc_pingpong uses TCP).
func (n *node) connectTo(peer *node) error {
	gid, err := peer.dev.QueryGID(1, 0)
	if err != nil {
		return err
	}
	if err := n.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1,
		AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	if err := n.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024,
		DestQPN: peer.qp.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
			verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return n.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

// complete polls the CQ until the work request's completion arrives.
func (n *node) complete() (verbs.WC, error) {
	var wcs [1]verbs.WC
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		k, err := n.cq.Poll(wcs[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if k == 1 {
			if wcs[0].Status != verbs.WCSuccess {
				return wcs[0], fmt.Errorf("work request %d: %v", wcs[0].ID, wcs[0].Status)
			}
			return wcs[0], nil
		}
		time.Sleep(10 * time.Microsecond)
	}
	return verbs.WC{}, fmt.Errorf("no completion within 5s")
}

// Two software devices in one process, an RC connection between them, an RDMA WRITE
// into the peer's memory and an RDMA READ of it back: the peer's CPU takes no part.
func Example_rdmaWriteAndRead() {
	a, err := openNode("127.12.0.1")
	if err != nil {
		log.Fatal(err)
	}
	defer a.dev.Close()
	b, err := openNode("127.12.0.2")
	if err != nil {
		log.Fatal(err)
	}
	defer b.dev.Close()
	if err := a.connectTo(b); err != nil {
		log.Fatal(err)
	}
	if err := b.connectTo(a); err != nil {
		log.Fatal(err)
	}

	// WRITE the first 12 bytes of a's buffer to the start of b's (b's address and rkey
	// would travel with the QPN in a real program).
	n := copy(a.mr.Buf(), "written by a")
	err = a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := a.complete(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("b's memory: %q\n", b.mr.Buf()[:n])

	// READ them back into the second half of a's buffer.
	err = a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(32, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	wc, err := a.complete()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%v completed, %d bytes: %q\n", wc.Opcode, wc.ByteLen, a.mr.Buf()[32:32+n])
	// Output:
	// b's memory: "written by a"
	// RDMA_READ completed, 12 bytes: "written by a"
}
