package perftest

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

// decimals is a number written with n digits after the point, as perftest's %.2lf and
// %.6lf write its results.
type decimals struct {
	v float64
	n int
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
		case decimals:
			fmt.Fprintf(b, "%.*f", v.n, v.v)
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

// bwResults is perftest's REPORT_FMT_JSON: bandwidths to 2 decimals, or 6 when an
// average under 0.1 Gb/s would round away (its inc_accuracy), the message rate to 6.
func bwResults(r bwRow, gb, cpu bool) []kv {
	peak, avg := r.PeakMiB, r.AvgMiB
	if gb {
		peak, avg = gbits(peak), gbits(avg)
	}
	n := 2
	if gb && avg < 0.1 {
		n = 6
	}
	out := []kv{{"MsgSize", r.Bytes}, {"n_iterations", r.Iterations}, {"BW_peak", decimals{peak, n}},
		{"BW_average", decimals{avg, n}}, {"MsgRate", decimals{r.MsgRate, 6}}}
	if cpu {
		out = append(out, kv{"CPU_util", decimals{r.CPU, 2}})
	}
	return out
}

// latResults is perftest's REPORT_FMT_LAT_JSON: microseconds to 2 decimals.
func latResults(r latRow) []kv {
	us := func(v float64) decimals { return decimals{v, 2} }
	return []kv{{"MsgSize", r.Bytes}, {"n_iterations", r.Iterations}, {"t_min", us(r.Min)}, {"t_max", us(r.Max)},
		{"t_typical", us(r.Typical)}, {"t_avg", us(r.Avg)}, {"t_stdev", us(r.Stdev)}, {"percentile_99", us(r.P99)},
		{"percentile_99.9", us(r.P999)}}
}

// writeJSONFile writes --out_json's file: the test's facts and the last row printed.
func writeJSONFile(file string, testInfo, results []kv) error {
	var b bytes.Buffer
	writeObject(&b, []kv{{"test_info", testInfo}, {"results", results}})
	b.WriteString("\n")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--out_json: %v", err)
	}
	return nil
}
