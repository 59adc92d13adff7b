package pingpong

import (
	"fmt"
	"math/rand/v2"
	"net"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/pingpongrec"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

func (c *side) localDests() []pingpongrec.Dest {
	n := c.o.numQP
	if c.kind == SRQ {
		n = maxQP
	}
	out := make([]pingpongrec.Dest, n)
	for i, qp := range c.qps {
		out[i] = pingpongrec.Dest{QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: c.ep.GID}
	}
	return out
}

// printDest prints one address line as the rdma-core examples do. ud_pingpong's local line
// has "PSN 0x...: GID" (a colon, not a comma); every other line has a comma.
func (c *side) printDest(which string, d pingpongrec.Dest) {
	sep := ","
	if c.kind == UD && which == "local address: " {
		sep = ":"
	}
	fmt.Printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", which, d.LID, d.QPN, d.PSN, sep, tool.GIDText(d.GID))
}

// connect runs the exchange and brings every QP to RTS towards its peer.
func (c *side) connect(server string) error {
	local := c.localDests()
	var conn net.Conn
	var err error
	if server == "" {
		l, err := exchange.Listen(c.ep.Addr, c.o.port)
		if err != nil {
			return err
		}
		for i := range c.qps {
			c.printDest("local address: ", local[i])
		}
		if conn, err = exchange.Accept(l); err != nil {
			return err
		}
		defer conn.Close()
		if c.remote, err = pingpongrec.ReadRemote(conn, len(local)); err != nil {
			return err
		}
		if err := c.rts(local); err != nil {
			return err
		}
		if err := pingpongrec.ServerFinish(conn, local); err != nil {
			return err
		}
	} else {
		for i := range c.qps {
			c.printDest("local address: ", local[i])
		}
		if conn, err = exchange.Dial(server, c.o.port); err != nil {
			return err
		}
		defer conn.Close()
		if c.remote, err = pingpongrec.ClientExchange(conn, local); err != nil {
			return err
		}
	}
	for i := range c.qps {
		c.printDest("remote address:", c.remote[i])
	}
	if server != "" {
		return c.rts(local)
	}
	return nil
}

// rts moves each QP to RTR and RTS with the rdma-core examples' attributes.
func (c *side) rts(local []pingpongrec.Dest) error {
	for i, qp := range c.qps {
		r := c.remote[i]
		if r.GID.IsZero() {
			return fmt.Errorf("the peer sent no GID for QP %d: RoCE needs one (run it with -g 0)", i)
		}
		if r.QPN == 0 {
			return fmt.Errorf("the peer has fewer QPs than this side (%d): use the same -q on both", c.o.numQP)
		}
		av := verbs.AHAttr{DGID: r.GID, SGIDIndex: uint8(c.o.dev.GIDIndex), HopLimit: 1, SL: uint8(c.o.sl), Port: uint8(c.o.dev.IBPort)}
		if c.kind == UD {
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: local[i].PSN}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("failed to modify QP to RTS: %v", err)
			}
			ah, err := c.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("failed to create AH: %v", err)
			}
			c.ah = append(c.ah, ah)
			continue
		}
		rtr := &verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: c.mtu, DestQPN: r.QPN, RQPSN: r.PSN,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: av}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if c.kind != UC {
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		if err := qp.Modify(rtr, mask); err != nil {
			return fmt.Errorf("failed to modify QP to RTR: %v", err)
		}
		rts := &verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: local[i].PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		if c.kind != UC {
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := qp.Modify(rts, mask); err != nil {
			return fmt.Errorf("failed to modify QP to RTS: %v", err)
		}
	}
	return nil
}
