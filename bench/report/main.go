// Command report turns the JSON rows of goverbs' perftest tools and of bench/nettest (the
// standard library's sockets) into comparison tables, each goverbs figure as a ratio of
// its baseline measured in the same round, an SVG plot of bandwidth against message
// size, and the performance page, docs/PERFORMANCE.md.
//
//	report -dir RESULTS [-svg FILE]     the comparison table on stdout (bench/compare.sh,
//	                                    bench/samehost.sh), and the counted runs' system
//	                                    calls where RESULTS has them (syscalls.json)
//	report -veth RESULTS                the veth table on stdout (bench/veth.sh)
//	report -rstream RESULTS             the rdmanet table on stdout (bench/rstream.sh)
//	report -afxdp RESULTS               the AF_XDP tables on stdout (bench/afxdp.sh)
//	report -page FILE DATA              the whole page from DATA's runs
//
// RESULTS holds one file per test, named after it (write_bw.json, tcp_bw.json, ...), with
// one row per round; the table compares medians over the rounds, and lists the ratio
// taken within each round and their median (the rounds are interleaved, so a slow spell
// of the machine that slows a test and its baseline alike cancels). Optionally
// sweep_*.json files hold one row per message size for the plot, and meta.json says how
// and where the run was made (bench/meta.sh writes it).
//
// DATA (docs/perf) holds one RESULTS directory per script: loopback (compare.sh), veth
// (veth.sh, a directory per MTU inside), rstream (rstream.sh), samehost (samehost.sh)
// and afxdp (afxdp.sh). The page is generated, never edited: its figures are the rows',
// its prose is in page.go.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	dir := flag.String("dir", "", "directory of bench/compare.sh's result files: print its table")
	svg := flag.String("svg", "", "with -dir: write the size sweep plot here")
	veth := flag.String("veth", "", "directory of bench/veth.sh's results: print its table")
	rstream := flag.String("rstream", "", "directory of bench/rstream.sh's results: print its table")
	afxdp := flag.String("afxdp", "", "directory of bench/afxdp.sh's results: print its tables")
	page := flag.String("page", "", "write the performance page here from the runs under the directory given as argument")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	switch {
	case *page != "":
		if flag.NArg() != 1 {
			fail(fmt.Errorf("-page FILE DATA: one data directory"))
		}
		if err := writePage(*page, flag.Arg(0)); err != nil {
			fail(err)
		}
	case *dir != "":
		if !compareSyscallTable(os.Stdout, *dir) {
			fail(fmt.Errorf("no result rows in %s", *dir))
		}
		if *svg != "" {
			if err := plot(*dir, *svg); err != nil {
				fail(err)
			}
		}
	case *veth != "":
		if !vethTable(os.Stdout, *veth) {
			fail(fmt.Errorf("no result rows in %s", *veth))
		}
	case *rstream != "":
		if !rstreamTable(os.Stdout, *rstream) {
			fail(fmt.Errorf("no result rows in %s", *rstream))
		}
	case *afxdp != "":
		if !compareSyscallTable(os.Stdout, *afxdp) {
			fail(fmt.Errorf("no result rows in %s", *afxdp))
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}
