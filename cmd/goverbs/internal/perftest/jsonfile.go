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
