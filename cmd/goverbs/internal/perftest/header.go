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

// testInfo is perftest's "test_info" object for this side.
func (s *side) testInfo() []kv {
	name := map[operation]string{opSend: "Send", opWrite: "RDMA_Write", opRead: "RDMA_Read", opAtomic: "Atomic"}[s.op] + "_"
	if s.op == opAtomic {
		name += s.p.Atomic + "_"
	}
	if s.lat {
		name += "Latency_"
	} else {
		if s.p.Bidir {
			name += "Bidirectional_"
		}
		if s.o.postList > 1 {
			name += "Post_List_"
		}
		name += "BW_"
	}
	info := []kv{{"test", name + "Test"}}
	if s.o.events {
		info = append(info, kv{"Test with events", "Using_" + s.ep.Dev.Name() + "_comp0"})
	}
	srq := "OFF"
	if s.o.srq {
		srq = "ON"
	}
	info = append(info, kv{"Dual_port", "OFF"}, kv{"Device", s.ep.Dev.Name()}, kv{"Number_of_qps", s.p.QPs},
		kv{"Transport_type", "IB"}, kv{"Connection_type", s.p.Conn}, kv{"Using_SRQ", srq},
		kv{"PCIe_relax_order", "Unsupported"}, kv{"ibv_wr_API", "OFF"})
	if s.isClient || s.p.Bidir {
		info = append(info, kv{"TX_depth", s.o.txDepth})
	}
	if s.o.postList > 1 {
		info = append(info, kv{"Post_List", s.o.postList})
	}
	if s.op == opSend && (!s.isClient || s.p.Bidir) {
		info = append(info, kv{"RX_depth", s.res.rxDepth})
	}
	if !s.lat {
		info = append(info, kv{"CQ_Moderation", min(s.o.cqMod, s.o.txDepth)})
	}
	info = append(info, kv{"Mtu", s.res.mtu.Bytes()}, kv{"Link_type", "Ethernet"}, kv{"GID_index", s.o.dev.GIDIndex})
	if s.op == opRead || s.op == opAtomic {
		info = append(info, kv{"Outstand_reads", s.o.outs}) // in place of Max_inline_data: nothing goes inline
	} else {
		info = append(info, kv{"Max_inline_data", s.o.inline})
	}
	return append(info, kv{"rdma_cm_QPs", onOff(s.o.rdmaCM)}, kv{"Use_ROCm_memory", "OFF"},
		kv{"Data_ex_method", s.o.dataExMethod()})
}
