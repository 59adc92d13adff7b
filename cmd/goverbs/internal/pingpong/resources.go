package pingpong

import (
	"fmt"
	"os"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// The buffer's contents follow rdma-core's examples, so that -c works against them in
// either role: rc, uc and ud fill it with 0x7b, srq with 0. With -c the client writes 0 to
// the first byte of every page of the message before its first send, and the server checks
// at the end that the last message it received has them (rdma-core checks only those bytes;
// goverbs also checks that the rest is the fill byte, which holds for both kinds of client).

func (c *side) fillByte() byte {
	if c.kind == SRQ {
		return 0
	}
	return 0x7b
}

// payloadOff is where the message starts in the buffer: behind the GRH area for UD.
func (c *side) payloadOff() int {
	if c.kind == UD {
		return verbs.GRHLen
	}
	return 0
}

// markPages writes the -c pattern into the message (the client does this before sending).
func (c *side) markPages() {
	buf, off := c.mr.Buf(), c.payloadOff()
	for i := 0; i < c.o.size; i += os.Getpagesize() {
		buf[off+i] = 0
	}
}

// checkPages prints rdma-core's "invalid data in page N" for every page of the received
// message that does not hold the -c pattern.
func (c *side) checkPages() {
	buf, off, page := c.mr.Buf(), c.payloadOff(), os.Getpagesize()
	for i := 0; i < c.o.size; i += page {
		for j := i; j < min(i+page, c.o.size); j++ {
			want := c.fillByte()
			if j == i {
				want = 0
			}
			if buf[off+j] != want {
				fmt.Printf("invalid data in page %d\n", i/page)
				break
			}
		}
	}
}

// bufLen is the registered buffer: UD receives land behind a 40-byte GRH area.
func (c *side) bufLen() int {
	if c.kind == UD {
		return c.o.size + verbs.GRHLen
	}
	return c.o.size
}

func (c *side) init() error {
	var err error
	dev := c.ep.Dev
	if c.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("couldn't allocate PD: %v", err)
	}
	buf := tool.Buffer(c.bufLen())
	for i := range buf {
		buf[i] = c.fillByte()
	}
	if c.mr, err = c.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("couldn't register MR: %v", err)
	}
	if c.cq, err = tool.NewCQ(dev, c.o.rxDepth+c.o.numQP, c.o.events, c.o.dev.Busy); err != nil {
		return err
	}
	if c.kind == SRQ {
		if c.srq, err = c.pd.CreateSRQ(verbs.SRQAttr{MaxWR: uint32(c.o.rxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %v", err)
		}
	}
	for i := 0; i < c.o.numQP; i++ {
		attr := verbs.QPInitAttr{Type: c.qpType(), SendCQ: c.cq.CQ, RecvCQ: c.cq.CQ, SRQ: c.srq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(c.o.rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}
		if c.srq != nil {
			attr.Cap.MaxRecvWR = 0
		}
		qp, err := c.pd.CreateQP(attr)
		if err != nil {
			return fmt.Errorf("couldn't create %v QP: %v", c.qpType(), err)
		}
		c.qps = append(c.qps, qp)
		c.ep.TrackQPs([]*verbs.QP{qp})
		init := &verbs.QPAttr{State: verbs.QPStateInit, Port: uint8(c.o.dev.IBPort)}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if c.kind == UD {
			init.QKey = udQKey
			mask |= verbs.QPAttrQKey
		} else {
			mask |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(init, mask); err != nil {
			return fmt.Errorf("failed to modify QP to INIT: %v", err)
		}
	}
	if c.kind == UD {
		// ibv_ud_pingpong moves its QP to RTS before the exchange.
		qp := c.qps[0]
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %v", err)
		}
	}
	c.routs, err = c.postRecv(c.o.rxDepth)
	if err != nil {
		return err
	}
	if c.routs < c.o.rxDepth {
		return fmt.Errorf("couldn't post receive (%d)", c.routs)
	}
	return nil
}

func (c *side) close() {
	c.ep.CloseQPs(c.qps)
	if c.srq != nil {
		c.srq.Close()
	}
	if c.cq != nil {
		c.cq.Close()
	}
	if c.mr != nil {
		c.mr.Close()
	}
	if c.pd != nil {
		c.pd.Close()
	}
}

// postRecv posts n receives (to the SRQ for srq_pingpong) and returns how many it posted.
func (c *side) postRecv(n int) (int, error) {
	wr := verbs.RecvWR{ID: wrRecv, SGL: []verbs.SGE{c.mr.SGE(0, c.bufLen())}}
	for i := 0; i < n; i++ {
		var err error
		if c.srq != nil {
			err = c.srq.PostRecv(wr)
		} else {
			err = c.qps[0].PostRecv(wr)
		}
		if err != nil {
			return i, fmt.Errorf("couldn't post receive: %v", err)
		}
	}
	return n, nil
}

func (c *side) postSend(i int) error {
	off := 0
	if c.kind == UD {
		off = verbs.GRHLen
	}
	wr := verbs.SendWR{ID: wrSend, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{c.mr.SGE(off, c.o.size)}}
	if c.kind == UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = c.ah[0], c.remote[0].QPN, udQKey
	}
	if err := c.qps[i].PostSend(wr); err != nil {
		return fmt.Errorf("couldn't post send: %v", err)
	}
	return nil
}
