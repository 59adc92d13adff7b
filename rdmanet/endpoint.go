package rdmanet

import (
	"errors"
	"fmt"

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
	ring  *verbs.MR // the peer's RDMA WRITEs land here
	stage *verbs.MR // this side's outgoing bytes, mirroring the peer's ring
	// credits is how many data messages the peer may have in flight: the receives
	// kept for them.
	credits int
}

func newEndpoint(pd *verbs.PD) (*endpoint, error) {
	return newEndpointSized(pd, ringSize, msgCredits)
}

// newEndpointSized makes an endpoint whose ring and message credits are smaller than
// the protocol's most (tests use it to reach the limits quickly).
func newEndpointSized(pd *verbs.PD, ring, credits int) (ep *endpoint, err error) {
	dev := pd.Device()
	ep = &endpoint{pd: pd, ch: dev.CreateCompChannel(), credits: credits}
	defer func() {
		if err != nil {
			ep.close()
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
	if ep.stage, err = pd.RegMR(make([]byte, ringSize), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	// The CM's INIT, rights included: it sets them again when it connects the QP,
	// and the tests that connect it by hand then get what a connection has.
	if err = cm.InitQP(ep.qp); err != nil {
		return nil, err
	}
	// Receives carry no buffer: data arrives by RDMA WRITE WITH IMMEDIATE into the
	// ring and control by a zero-length SEND WITH IMMEDIATE, so a receive is only a
	// slot for the immediate.
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

// setup is what this side advertises to the peer.
func (ep *endpoint) setup() setup {
	return setup{credits: uint16(ep.credits), ringSize: uint32(len(ep.ring.Buf())), ringAddr: ep.ring.Addr(),
		ringRKey: ep.ring.RKey()}
}

// close releases everything, QP first so that no access to the buffers follows.
func (ep *endpoint) close() error {
	var errs []error
	if ep.qp != nil {
		errs = append(errs, ep.qp.Close())
	}
	for _, mr := range []*verbs.MR{ep.ring, ep.stage} {
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
