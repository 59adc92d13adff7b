package perftest

import (
	"fmt"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
)

// printHeader prints perftest's banner and the address lines.
func (s *side) printHeader() {
	o := s.rep.out
	srq := "OFF"
	if s.res.srq != nil {
		srq = "ON"
	}
	o.textf("%s\n", resultLine)
	o.textf("                    %s\n", s.op.title(s.lat, s.p.Atomic))
	o.textf(" Dual-port       : OFF\t\tDevice         : %s\n", s.ep.Dev.Name())
	o.textf(" Number of qps   : %d\t\tTransport type : IB\n", s.p.QPs)
	o.textf(" Connection type : %s\t\tUsing SRQ      : %s\n", s.p.Conn, srq)
	o.textf(" TX depth        : %d\n", s.res.sq)
	if s.o.postList > 1 {
		o.textf(" Post List       : %d\n", s.o.postList)
	}
	if !s.lat {
		o.textf(" CQ Moderation   : %d\n", min(s.o.cqMod, s.o.txDepth))
	}
	o.textf(" Mtu             : %d[B]\n", s.res.mtu.Bytes())
	o.textf(" Link type       : Ethernet\n")
	o.textf(" GID index       : %d\n", s.o.dev.GIDIndex)
	if s.op == opRead || s.op == opAtomic {
		o.textf(" Outstand reads  : %d\n", s.o.outs)
	}
	o.textf(" Max inline data : %d[B]\n", s.o.inline)
	o.textf(" rdma_cm QPs\t : %s\n", onOff(s.o.rdmaCM))
	o.textf(" Data ex. method : %s\n", s.o.dataExMethod())
	o.textf("%s\n", resultLine)
	line := func(which string, d perftestcomm.Dest) {
		out := ""
		if s.op == opRead || s.op == opAtomic {
			out = fmt.Sprintf(" OUT 0x%02x", d.OutReads)
		}
		o.textf(" %s address: LID %04x QPN 0x%04x PSN 0x%06x%s RKey 0x%06x VAddr 0x%014x\n", which, d.LID, d.QPN, d.PSN, out, d.RKey, d.VAddr)
		o.textf(" GID: %s\n", gidDecimal(d.GID))
	}
	for i := range s.res.local {
		line("local", s.res.local[i])
	}
	for i := range s.res.remote {
		line("remote", s.res.remote[i])
	}
	o.textf("%s\n", resultLine)
	if s.lat {
		o.latHeader()
	} else {
		o.bwHeader()
	}
}
