package perftest

import (
	"fmt"
	"math/rand/v2"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// resources are a side's verbs objects and the layout of its buffer, made by setup for
// the run's parameters: one area per QP, the receive half first and then the send
// half, each large enough for a message and a GRH.
type resources struct {
	op      operation
	lat     bool
	conn    string // RC, UC or UD
	qpCount int
	maxSize int  // the largest message of the run
	cycle   int  // the span a perftest peer addresses in an area
	cas     bool // atomics: CMP_AND_SWAP rather than FETCH_AND_ADD
	o       *options
	ep      *tool.Endpoint
	rep     *reporter // warnings about settings lowered to fit

	pd      *verbs.PD
	mr      *verbs.MR
	scq     *tool.CQWaiter
	rcq     *tool.CQWaiter // the send CQ but for SEND tests
	srq     *verbs.SRQ
	qps     []*verbs.QP
	ah      []*verbs.AH    // UD: one per QP
	index   map[uint32]int // a QP's number to its place in qps
	slot    int            // bytes per QP in the buffer: receive area, then send area
	half    int
	local   []perftestcomm.Dest
	remote  []perftestcomm.Dest
	mtu     verbs.MTU
	sq      int // send queue depth per QP
	rxDepth int // receives posted per QP: -r, lowered when the QPs would overflow the receive CQ
}

// close closes what open made; it may have made only part.
func (r *resources) close() {
	if r == nil {
		return
	}
	r.ep.CloseQPs(r.qps)
	if r.srq != nil {
		r.srq.Close()
	}
	if r.rcq != nil && r.rcq != r.scq {
		r.rcq.Close()
	}
	if r.scq != nil {
		r.scq.Close()
	}
	if r.mr != nil {
		r.mr.Close()
	}
	if r.pd != nil {
		r.pd.Close()
	}
}

// open creates the resources in INIT, receives posted.
func (r *resources) open() error {
	dev := r.ep.Dev
	var err error
	if r.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %v", err)
	}
	// Each QP's area holds a message and a GRH, and at least the span in which a
	// perftest peer cycles its remote address (perftest's cycle buffer).
	r.half = (max(r.maxSize+verbs.GRHLen, r.cycle) + 63) &^ 63
	r.slot = 2 * r.half
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if r.mr, err = r.pd.RegMR(tool.Buffer(r.slot*r.qpCount), access); err != nil {
		return fmt.Errorf("couldn't register MR: %v", err)
	}
	sq := r.o.txDepth
	if r.lat {
		sq = 64
	}
	// The CQs as perftest sizes them (create_cqs): the send CQ holds every QP's send
	// queue, and only SEND tests have receive completions, hence a receive CQ. The CQs
	// must fit the device's CQE limit; when many QPs would overflow it the queues are
	// shortened to fit (perftest would fail to create the CQ).
	maxCQE := dev.Query().MaxCQE
	if sq*r.qpCount > maxCQE {
		sq = maxCQE / r.qpCount
		r.rep.warnf("tx depth lowered to %d so that %d QPs fit one CQ of %d entries", sq, r.qpCount, maxCQE)
	}
	r.rxDepth = r.o.rxDepth
	if r.rxDepth*r.qpCount > maxCQE {
		r.rxDepth = maxCQE / r.qpCount
		if r.op == opSend {
			r.rep.warnf("rx depth lowered to %d so that %d QPs fit one CQ of %d entries", r.rxDepth, r.qpCount, maxCQE)
		}
	}
	r.sq = sq
	if r.scq, err = tool.NewCQ(dev, sq*r.qpCount, r.o.events, r.ep.Busy); err != nil {
		return err
	}
	r.rcq = r.scq
	if r.op == opSend {
		if r.rcq, err = tool.NewCQ(dev, r.rxDepth*r.qpCount, r.o.events, r.ep.Busy); err != nil {
			return err
		}
	}
	if r.o.srq && r.op == opSend {
		// --use-srq: every QP receives from one SRQ of --rx-depth entries, as perftest.
		r.rxDepth = min(r.o.rxDepth, maxCQE)
		if r.srq, err = r.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(r.rxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %v", err)
		}
	}
	r.index = make(map[uint32]int)
	for i := 0; i < r.qpCount; i++ {
		qp, err := r.pd.CreateQP(verbs.QPInitAttr{Type: r.qpType(), SendCQ: r.scq.CQ, RecvCQ: r.rcq.CQ, SRQ: r.srq,
			Cap: verbs.QPCap{MaxSendWR: uint32(sq), MaxRecvWR: uint32(r.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: uint32(r.o.inline)}})
		if err != nil {
			return fmt.Errorf("couldn't create %v QP: %v", r.qpType(), err)
		}
		r.qps = append(r.qps, qp)
		r.ep.TrackQPs([]*verbs.QP{qp})
		r.index[qp.QPN()] = i
		init := &verbs.QPAttr{State: verbs.QPStateInit, Port: uint8(r.o.dev.IBPort), AccessFlags: access}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if r.conn == "UD" {
			init.QKey = udQKey
			mask |= verbs.QPAttrQKey
		} else {
			mask |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(init, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %v", err)
		}
		r.local = append(r.local, perftestcomm.Dest{OutReads: r.o.outs, QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: r.mr.RKey(), VAddr: r.mr.AddrOf(i * r.slot), GID: r.ep.GID})
	}
	if r.op == opSend {
		qps := r.qps
		if r.srq != nil {
			qps = qps[:1] // postRecv posts to the SRQ
		}
		for i := range qps {
			for k := 0; k < r.rxDepth; k++ {
				if err := r.postRecv(i); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// qpType is the QP type of the connection type (-c).
func (r *resources) qpType() verbs.QPType {
	switch r.conn {
	case "UC":
		return verbs.QPTypeUC
	case "UD":
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// postRecv posts one receive for QP i (to the SRQ, with --use-srq).
func (r *resources) postRecv(i int) error {
	n := r.maxSize
	if r.conn == "UD" {
		n += verbs.GRHLen
	}
	var err error
	if r.srq != nil {
		// One buffer for all: a bandwidth test does not look at the data.
		err = r.srq.PostRecv(verbs.RecvWR{ID: 0, SGL: []verbs.SGE{r.mr.SGE(0, n)}})
	} else {
		err = r.qps[i].PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{r.mr.SGE(i*r.slot, n)}})
	}
	if err != nil {
		return fmt.Errorf("couldn't post receive: %v", err)
	}
	return nil
}

// rts brings every QP to RTS towards its remote.
func (r *resources) rts() error {
	for i, qp := range r.qps {
		rem, l := r.remote[i], r.local[i]
		av := verbs.AHAttr{DGID: rem.GID, SGIDIndex: uint8(r.o.dev.GIDIndex), HopLimit: 64, Port: uint8(r.o.dev.IBPort)}
		switch r.conn {
		case "UD":
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
				return fmt.Errorf("failed to modify QP to RTR: %v", err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: l.PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %v", err)
			}
			ah, err := r.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("failed to create AH: %v", err)
			}
			r.ah = append(r.ah, ah)
			continue
		case "UC":
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: r.mtu, DestQPN: rem.QPN, RQPSN: rem.PSN, AH: av},
				verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTR: %v", err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: l.PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %v", err)
			}
			continue
		}
		outs := uint8(min(r.o.outs, rem.OutReads))
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: r.mtu, DestQPN: rem.QPN, RQPSN: rem.PSN, AH: av,
			MaxDestRdAtomic: outs, MinRNRTimer: 12},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
				verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %v", err)
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: l.PSN, Timeout: uint8(r.o.timeout), RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: outs},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %v", err)
		}
	}
	return nil
}

// wr builds the work request of this test for QP i and size bytes.
func (r *resources) wr(i, size int) verbs.SendWR {
	rem := r.remote[i]
	base := i * r.slot
	wr := verbs.SendWR{RemoteAddr: rem.VAddr, RKey: rem.RKey}
	switch r.op {
	case opSend:
		wr.Opcode = verbs.WRSend
		wr.SGL = []verbs.SGE{r.mr.SGE(base+r.half, size)}
		if r.conn == "UD" {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ah[i], rem.QPN, udQKey
		}
	case opWrite:
		wr.Opcode = verbs.WRRDMAWrite
		wr.SGL = []verbs.SGE{r.mr.SGE(base+r.half, size)}
	case opRead:
		wr.Opcode = verbs.WRRDMARead
		wr.SGL = []verbs.SGE{r.mr.SGE(base, size)}
	case opAtomic:
		wr.Opcode = verbs.WRAtomicFetchAdd
		wr.SGL = []verbs.SGE{r.mr.SGE(base, 8)}
		wr.CompareAdd = 1
		if r.cas {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
			wr.CompareAdd, wr.Swap = 0, 0 // perftest's operands: the target stays 0
		}
	}
	if (r.op == opSend || r.op == opWrite) && size <= r.o.inline {
		wr.Flags |= verbs.SendInline
	}
	return wr
}
