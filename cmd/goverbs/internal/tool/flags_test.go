package tool

import (
	"bytes"
	"testing"
)

func testFlags() (*FlagSet, *int, *int, *bool, *bool) {
	fs := NewFlagSet(&Command{Name: "write_bw", Summary: "RDMA WRITE bandwidth (ib_write_bw)"})
	var size, qps int
	var cpuFreq, hist bool
	fs.IntOpt(&size, "s", "size", 65536, "`SIZE` of message to exchange")
	fs.IntOpt(&qps, "q", "qp", 1, "`NUMBER` of QPs")
	fs.BoolOpt(&cpuFreq, "F", "CPU-freq", "do not fail on CPU frequency warnings")
	fs.BoolOpt(&hist, "H", "report-histogram", "print every sample")
	return fs, &size, &qps, &cpuFreq, &hist
}

// TestGetoptRules: the spellings getopt_long accepts, parsed alike.
func TestGetoptRules(t *testing.T) {
	for _, args := range [][]string{
		{"-s4096", "-Fq2", "-H", "server"},
		{"-s", "4096", "-F", "-q", "2", "server", "--report-histogram"},
		{"--size=4096", "server", "--CPU-freq", "--qp", "2", "--report-histogrm"},
		{"--si", "4096", "--CPU", "--qp=2", "--report-h", "server"},
	} {
		fs, size, qps, cpuFreq, hist := testFlags()
		pos, err := fs.ParseArgs(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		server, err := OneArg(pos)
		if err != nil || server != "server" || *size != 4096 || *qps != 2 || !*cpuFreq || !*hist {
			t.Errorf("%q: server %q (%v), size %d, qps %d, -F %v, -H %v", args, server, err, *size, *qps, *cpuFreq, *hist)
		}
	}
	if _, err := OneArg([]string{"a", "b"}); err == nil {
		t.Error("two server addresses accepted")
	}
}

func TestHelpPage(t *testing.T) {
	fs, _, _, _, _ := testFlags()
	var b bytes.Buffer
	fs.printHelp(&b)
	want := `usage: goverbs write_bw [flags] [server address]

RDMA WRITE bandwidth (ib_write_bw)

flags:
  -s, --size SIZE         SIZE of message to exchange (default 65536)
  -q, --qp NUMBER         NUMBER of QPs (default 1)
  -F, --CPU-freq          do not fail on CPU frequency warnings
  -H, --report-histogram  print every sample
`
	if b.String() != want {
		t.Errorf("help page:\n%s\nwant:\n%s", b.String(), want)
	}
}
