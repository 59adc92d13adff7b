package rdmanet

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/verbs"
)

// endpoint is one side's verbs objects for a connection: a QP with its CQ and
// completion channel, the receive ring the peer writes into, and the staging buffer
// this side writes from. It is made with the QP in INIT and every receive posted, so
// that whoever connects the QP (the CM, or a test) can bring it to RTS and the peer's
// first message finds a receive waiting.
type endpoint struct {
	pd    *verbs.PD
	ch    *verbs.CompChannel
	cq    *verbs.CQ
	qp    *verbs.QP
	ring  *verbs.MR // the peer's data WRITEs land here
	stage *verbs.MR // this side's outgoing bytes, a ring freed as WRITEs complete
	// tsgl is the target SGL: the peer writes each buffer it frees into its next
	// entry (an SGL update), in this host's byte order.
	tsgl *verbs.MR
	// ctrl holds the SGEs this side's SGL updates send, one slot per control message
	// in flight.
	ctrl     *verbs.MR
	qpClosed bool // closeQP ran (teardown's goroutine only)
	// credits is how many data messages the peer may have in flight: the receives
	// kept for them.
	credits int
}

func newEndpoint(pd *verbs.PD) (*endpoint, error) {
	return newEndpointSized(pd, ringSize, msgCredits)
}

// newEndpointSized makes an endpoint whose ring and message credits are smaller than
// the protocol's most (tests use it to reach the limits quickly).
func newEndpointSized(pd *verbs.PD, ring, credits int) (_ *endpoint, err error) {
	dev := pd.Device()
	ep := &endpoint{pd: pd, ch: dev.CreateCompChannel(), credits: credits}
	defer func() {
		if err != nil {
			ep.close() // ep, not the result, which a failing return sets to nil
		}
	}()
	if ep.cq, err = dev.CreateCQ(recvDepth+sendDepth, ep.ch); err != nil {
		return nil, err
	}
	ep.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: ep.cq, RecvCQ: ep.cq,
		Cap: verbs.QPCap{MaxSendWR: sendDepth, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	if ep.ring, err = pd.RegMR(make([]byte, ring), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if ep.stage, err = pd.RegMR(make([]byte, stageSize), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	// The small ones on a page of their own, as an attached device (goverbs serve)
	// registers only whole pages; the ring and the stage are large allocations, on
	// pages of their own already.
	if ep.tsgl, err = pd.RegMR(pageBuf(sglEntries*sgeLen), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if ep.ctrl, err = pd.RegMR(pageBuf(ctrlSlots*sgeLen), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	// The CM's INIT, rights included: it sets them again when it connects the QP,
	// and the tests that connect it by hand then get what a connection has.
	if err = cm.InitQP(ep.qp); err != nil {
		return nil, err
	}
	// Receives carry no buffer: every message is an RDMA WRITE WITH IMMEDIATE (data
	// into the ring, SGL updates into the target SGL, the rest zero-length), so a
	// receive is only a slot for the immediate, as rsockets posts them.
	for i := 0; i < recvDepth; i++ {
		if err = ep.qp.PostRecv(verbs.RecvWR{ID: wrRecv}); err != nil {
			return nil, fmt.Errorf("rdmanet: posting receives: %w", err)
		}
	}
	if err = ep.cq.RequestNotify(false); err != nil {
		return nil, err
	}
	return ep, nil
}

// connData is what this side advertises to the peer: its credits, its target SGL
// and the first half of its ring (the second follows as an SGL update once
// connected, as rsockets does).
func (ep *endpoint) connData() connData {
	var flags uint8
	if hostIsNet() {
		flags |= connFlagNet
	}
	return connData{flags: flags, credits: uint16(ep.credits),
		targetSGL: sge{addr: ep.tsgl.Addr(), key: ep.tsgl.RKey(), length: sglEntries},
		dataBuf:   sge{addr: ep.ring.Addr(), key: ep.ring.RKey(), length: uint32(len(ep.ring.Buf()) / 2)}}
}

// closeQP destroys the QP ahead of the rest (Conn.teardown).
// A QP closed stays in the field: a Read still spinning on a closed Conn may poll and
// repost once more, which a closed QP refuses with an error.
func (ep *endpoint) closeQP() error {
	if ep.qp == nil || ep.qpClosed {
		return nil
	}
	ep.qpClosed = true
	return ep.qp.Close()
}

// close releases everything, QP first so that no access to the buffers follows.
func (ep *endpoint) close() error {
	errs := []error{ep.closeQP()}
	for _, mr := range []*verbs.MR{ep.ring, ep.stage, ep.tsgl, ep.ctrl} {
		if mr != nil {
			errs = append(errs, mr.Close())
		}
	}
	if ep.cq != nil {
		errs = append(errs, ep.cq.Close())
	}
	if ep.ch != nil {
		errs = append(errs, ep.ch.Close())
	}
	return errors.Join(errs...)
}

// pageBuf is whole pages of their own holding at least n bytes.
func pageBuf(n int) []byte {
	ps := os.Getpagesize()
	size := (max(n, 1) + ps - 1) / ps * ps
	b := make([]byte, size+ps)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & uintptr(ps-1))
	return b[off : off+size : off+size]
}
