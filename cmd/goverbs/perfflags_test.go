package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange/perftestcomm"
)

// perftest's flags, each run end to end (--loopback: both sides in one process).

func loop(t *testing.T, args ...string) result {
	t.Helper()
	r := runBin(t, 60*time.Second, append(args[:1:1], append([]string{"--loopback"}, args[1:]...)...)...)
	mustSucceed(t, strings.Join(args, " "), r)
	return r
}

func TestPerfPostListEventsTimeout(t *testing.T) {
	r := loop(t, "write_bw", "-l", "8", "-n", "100", "-s", "1024", "-e", "-u", "10")
	mustContain(t, "write_bw -l 8", r.stdout, " Post List       : 8\n", " 1024       104 ") // whole lists: 13 of 8
	r = loop(t, "send_bw", "-l4", "-n", "100", "-s", "1024", "-e")
	mustContain(t, "send_bw -l4", r.stdout, " 1024       100 ")
}

func TestPerfAtomicTypes(t *testing.T) {
	r := loop(t, "atomic_bw", "-A", "CMP_AND_SWAP", "-n", "100")
	mustContain(t, "atomic_bw -A CMP_AND_SWAP", r.stdout, "Atomic CMP_AND_SWAP BW Test", " 8          100 ")
	r = loop(t, "atomic_lat", "--atomic_type=FETCH_AND_ADD", "-n", "50")
	mustContain(t, "atomic_lat", r.stdout, "Atomic FETCH_AND_ADD Latency Test")
	badInput(t, "invalid atomic type", "atomic_bw", "--loopback", "-A", "SWAP")
}

func TestPerfSRQ(t *testing.T) {
	r := loop(t, "send_bw", "--use-srq", "-q", "4", "-r", "64", "-n", "100", "-s", "2048")
	mustContain(t, "send_bw --use-srq", r.stdout, "Using SRQ      : ON", " 2048       400 ") // every QP's, as perftest
}

func TestPerfNoPeakAndLimits(t *testing.T) {
	r := loop(t, "write_bw", "-N", "-n", "200", "-s", "4096", "--report_gbits", "-w", "0.001", "-y", "0.000001")
	if f := strings.Fields(lastRow(r.stdout)); len(f) < 3 || f[2] != "0.00" {
		t.Errorf("-N: want peak 0.00, row %q", lastRow(r.stdout))
	}
	r = runBin(t, 60*time.Second, "write_bw", "--loopback", "-n", "100", "-s", "4096", "-w", "1e12")
	if r.code != 1 || !strings.Contains(r.stderr, "is below the limit 1000000000000.00 (-w)") {
		t.Errorf("-w 1e12: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestPerfRateLimit(t *testing.T) {
	// 100 messages of 64 KiB at 100 MB/s take at least 65 ms.
	start := time.Now()
	loop(t, "write_bw", "-n", "100", "--rate_limit", "100", "--rate_units", "M")
	if el := time.Since(start); el < 55*time.Millisecond {
		t.Errorf("--rate_limit 100 MB/s moved 6.5 MB in %v", el)
	}
	badInput(t, "is not supported", "write_bw", "--loopback", "--rate_limit", "1", "--rate_limit_type", "HW")
}

func TestPerfOutJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "report.json")
	loop(t, "write_bw", "-n", "100", "-s", "4096", "--out_json", "--out_json_file", file, "--cpu_util")
	var rep struct {
		Info    map[string]any     `json:"test_info"`
		Results map[string]float64 `json:"results"`
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if rep.Info["test"] != "RDMA_Write_BW_Test" || rep.Info["Connection_type"] != "RC" || rep.Info["Mtu"] != 4096.0 {
		t.Errorf("test_info: %v", rep.Info)
	}
	for _, k := range []string{"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate", "CPU_util"} {
		if _, ok := rep.Results[k]; !ok {
			t.Errorf("results lack %q: %s", k, b)
		}
	}
	if rep.Results["MsgSize"] != 4096 || rep.Results["n_iterations"] != 100 || rep.Results["BW_average"] <= 0 {
		t.Errorf("results: %v", rep.Results)
	}
	// perftest's keys in perftest's order (write_test_info_to_file, REPORT_FMT_JSON),
	// and its decimals: BW to 2, the message rate to 6.
	wantKeys(t, "write_bw", b, "test_info", "test", "Dual_port", "Device", "Number_of_qps", "Transport_type",
		"Connection_type", "Using_SRQ", "PCIe_relax_order", "ibv_wr_API", "TX_depth", "CQ_Moderation", "Mtu", "Link_type",
		"GID_index", "Max_inline_data", "rdma_cm_QPs", "Use_ROCm_memory", "Data_ex_method",
		"results", "MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate", "CPU_util")
	if !regexp.MustCompile(`"BW_peak": [0-9]+\.[0-9]{2},\n"BW_average": [0-9]+\.[0-9]{2},\n"MsgRate": [0-9]+\.[0-9]{6},\n"CPU_util": [0-9]+\.[0-9]{2}\n`).Match(b) {
		t.Errorf("write_bw --out_json's numbers are not written as perftest's (%%.2f, %%.6f):\n%s", b)
	}
	// READ and atomics report their outstanding reads where the others report inline data.
	loop(t, "read_lat", "-n", "50", "--out_json", "--out_json_file", file)
	b, _ = os.ReadFile(file)
	wantKeys(t, "read_lat", b, "test_info", "test", "Dual_port", "Device", "Number_of_qps", "Transport_type",
		"Connection_type", "Using_SRQ", "PCIe_relax_order", "ibv_wr_API", "TX_depth", "Mtu", "Link_type",
		"GID_index", "Outstand_reads", "rdma_cm_QPs", "Use_ROCm_memory", "Data_ex_method",
		"results", "MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9")
	loop(t, "send_lat", "-n", "50", "--out_json", "--out_json_file", file)
	b, _ = os.ReadFile(file)
	for _, k := range []string{`"test": "Send_Latency_Test"`, `"t_typical": `, `"percentile_99.9": `} {
		if !strings.Contains(string(b), k) {
			t.Errorf("send_lat --out_json lacks %s:\n%s", k, b)
		}
	}
	if !regexp.MustCompile(`"t_min": [0-9]+\.[0-9]{2},\n`).Match(b) {
		t.Errorf("send_lat --out_json's latencies are not written as perftest's (%%.2f):\n%s", b)
	}
}

// wantKeys checks the keys of an --out_json file, in their order.
func wantKeys(t *testing.T, tool string, b []byte, want ...string) {
	t.Helper()
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^"([^"]+)": `).FindAllSubmatch(b, -1) {
		got = append(got, string(m[1]))
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s --out_json keys\n%q\nwant\n%q", tool, got, want)
	}
}

func TestPerfHistogram(t *testing.T) {
	for _, flag := range []string{"-H", "-U"} {
		r := loop(t, "read_lat", flag, "-n", "20")
		i := strings.Index(r.stdout, "#, usec\n")
		if i < 0 {
			t.Fatalf("%s: no histogram:\n%s", flag, r.stdout)
		}
		var prev float64
		lines := strings.Split(strings.TrimSpace(r.stdout[i:]), "\n")[1:]
		n := 0
		for _, l := range lines {
			idx, v, ok := strings.Cut(l, ", ")
			if !ok {
				break
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || idx != strconv.Itoa(n+1) {
				t.Fatalf("%s: bad sample line %q", flag, l)
			}
			if flag == "-H" && x < prev {
				t.Errorf("-H: samples not sorted: %v after %v", x, prev)
			}
			prev = x
			n++
		}
		if n != 20 {
			t.Errorf("%s: %d samples, want 20", flag, n)
		}
	}
	badInput(t, "-C (report cycles) is not supported", "send_lat", "--loopback", "-C")
}

func TestPerfUDSizeAndVersion(t *testing.T) {
	r := loop(t, "send_bw", "-c", "UD", "-n", "100")
	mustContain(t, "send_bw -c UD", r.stdout, " 4096       100 ")
	mustContain(t, "send_bw -c UD", r.stderr, "max msg size in UD is the MTU 4096: changing to this size")
	badInput(t, "larger than the MTU", "send_bw", "--loopback", "-c", "UD", "-s", "8192")
	for _, v := range []string{"-V", "--version"} {
		r = runBin(t, 10*time.Second, "write_bw", v)
		if r.code != 0 || r.stdout != "Version: "+perftestcomm.Version+"\n" {
			t.Errorf("write_bw %s: exit %d, %q", v, r.code, r.stdout)
		}
	}
}

func TestPerfRunInfinitely(t *testing.T) {
	s := startServer(t, "#bytes", "write_bw", "--loopback", "--run_infinitely", "-D", "1", "-s", "4096")
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		rows := strings.Count(s.out.String(), "\n 4096 ")
		s.mu.Unlock()
		if rows >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--run_infinitely -D 1: %d rows after 20s", rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.cmd.Process.Signal(os.Interrupt)
	r := s.wait(t)
	mustSucceed(t, "--run_infinitely after Ctrl-C", r)
}

// TestPerfLargeMessagesCompleteEveryWR: as perftest, a bandwidth test above 8 KiB
// completes every work request unless -Q asks otherwise, and one that asks is warned;
// at 8 KiB the moderation stays 100; and -Q with a post list must divide the list.
func TestPerfLargeMessagesCompleteEveryWR(t *testing.T) {
	r := loop(t, "write_bw", "-n", "50", "-s", "65536")
	mustContain(t, "write_bw -s 65536", r.stdout, " CQ Moderation   : 1\n", " 65536      50 ")
	r = loop(t, "write_bw", "-n", "50", "-s", "65536", "-Q", "10")
	mustContain(t, "write_bw -s 65536 -Q 10", r.stdout, " CQ Moderation   : 10\n")
	mustContain(t, "write_bw -s 65536 -Q 10 (stderr)", r.stderr, "Warning: Large message requested and CQ moderation enabled")
	r = loop(t, "write_bw", "-n", "200", "-s", "8192")
	mustContain(t, "write_bw -s 8192", r.stdout, " CQ Moderation   : 100\n")
	badInput(t, "must be a multiple of CQ moderation", "write_bw", "--loopback", "-s", "4096", "-l", "8", "-Q", "3")
}
