package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// --out_json: the report as perftest writes it (perftest_parameters.c,
// write_test_info_to_file and the results writers): an object with "test_info", the
// header's facts, and "results", the last row (perftest rewrites the file for each row
// of an -a sweep, so the file holds the last size). The keys and their order are
// perftest's, so that scripts made for perftest read ours.

// kv is one member of a JSON object, kept in order.
type kv struct {
	k string
	v any
}

func writeObject(b *bytes.Buffer, members []kv) {
	b.WriteString("{\n")
	for i, m := range members {
		key, _ := json.Marshal(m.k)
		b.Write(key)
		b.WriteString(": ")
		switch v := m.v.(type) {
		case []kv:
			writeObject(b, v)
		case float64:
			fmt.Fprintf(b, "%.6f", v)
		default:
			val, _ := json.Marshal(v)
			b.Write(val)
		}
		if i < len(members)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}")
}

// testInfo is perftest's "test_info" object for this side.
func (s *perfSide) testInfo() []kv {
	name := map[perfTest]string{testSend: "Send", testWrite: "RDMA_Write", testRead: "RDMA_Read", testAtomic: "Atomic"}[s.t] + "_"
	if s.t == testAtomic {
		name += s.p.atomic + "_"
	}
	if s.lat {
		name += "Latency_"
	} else {
		if s.p.bidir {
			name += "Bidirectional_"
		}
		if s.o.postList > 1 {
			name += "Post_List_"
		}
		name += "BW_"
	}
	info := []kv{{"test", name + "Test"}}
	if s.o.events {
		info = append(info, kv{"Test with events", "Using_" + s.ep.dev.Name() + "_comp0"})
	}
	srq := "OFF"
	if s.o.srq {
		srq = "ON"
	}
	info = append(info, kv{"Dual_port", "OFF"}, kv{"Device", s.ep.dev.Name()}, kv{"Number_of_qps", s.p.qps},
		kv{"Transport_type", "IB"}, kv{"Connection_type", s.p.conn}, kv{"Using_SRQ", srq},
		kv{"PCIe_relax_order", "Unsupported"}, kv{"ibv_wr_API", "OFF"})
	if s.isClient || s.p.bidir {
		info = append(info, kv{"TX_depth", s.o.txDepth})
	}
	if s.o.postList > 1 {
		info = append(info, kv{"Post_List", s.o.postList})
	}
	if s.t == testSend && (!s.isClient || s.p.bidir) {
		info = append(info, kv{"RX_depth", s.rxDepth})
	}
	if !s.lat {
		info = append(info, kv{"CQ_Moderation", min(s.o.cqMod, s.o.txDepth)})
	}
	info = append(info, kv{"Mtu", s.mtu.Bytes()}, kv{"Link_type", "Ethernet"}, kv{"GID_index", s.o.dev.gidIdx},
		kv{"Max_inline_data", s.o.inline})
	if s.t == testRead || s.t == testAtomic {
		info = append(info, kv{"Outstand_reads", s.o.outs})
	}
	return append(info, kv{"rdma_cm_QPs", onOff(s.o.rdmaCM)}, kv{"Data_ex_method", s.o.dataExMethod()})
}

func bwResults(r bwRow, gb, cpu bool) []kv {
	peak, avg := r.PeakMiB, r.AvgMiB
	if gb {
		peak, avg = gbits(peak), gbits(avg)
	}
	out := []kv{{"MsgSize", r.Bytes}, {"n_iterations", r.Iterations}, {"BW_peak", peak}, {"BW_average", avg}, {"MsgRate", r.MsgRate}}
	if cpu {
		out = append(out, kv{"CPU_util", r.CPU})
	}
	return out
}

func latResults(r latRow) []kv {
	return []kv{{"MsgSize", r.Bytes}, {"n_iterations", r.Iterations}, {"t_min", r.Min}, {"t_max", r.Max},
		{"t_typical", r.Typical}, {"t_avg", r.Avg}, {"t_stdev", r.Stdev}, {"percentile_99", r.P99}, {"percentile_99.9", r.P999}}
}

// writeJSONFile writes --out_json's file with the last row printed.
func (s *perfSide) writeJSONFile() error {
	var b bytes.Buffer
	writeObject(&b, []kv{{"test_info", s.testInfo()}, {"results", s.lastResult}})
	b.WriteString("\n")
	if err := os.WriteFile(s.o.jsonFile, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--out_json: %v", err)
	}
	return nil
}
