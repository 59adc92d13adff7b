// Command report turns the JSON rows of goverbs' perftest tools and of bench/nettest (the
// standard library's sockets) into the comparison table, each goverbs figure as a ratio
// of its baseline measured in the same run, and an SVG plot of bandwidth against
// message size.
//
//	report -dir RESULTS [-svg FILE]
//
// RESULTS holds one file per test, named after it (write_bw.json, tcp_bw.json, ...), with
// one row per round; the table compares medians over the rounds, and lists the ratio
// taken within each round and their median (the rounds are interleaved, so a slow spell
// of the machine that slows a test and its baseline alike cancels). Optionally
// sweep_*.json files hold one row per message size for the plot.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

type row map[string]float64

func load(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []row
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		rows = append(rows, r)
	}
	return rows, sc.Err()
}

// comparisons: the goverbs run, its baseline (nettest, the standard library), the figure
// compared and its unit. A run without a baseline is a baseline-only row (base "").
var comparisons = []struct{ run, base, key, unit, what string }{
	{"write_bw", "tcp_bw", "bw_avg_mib_s", "MiB/s", "RC WRITE 64 KiB bandwidth vs Go TCP stream"},
	{"send_bw", "tcp_bw", "bw_avg_mib_s", "MiB/s", "RC SEND 64 KiB bandwidth vs Go TCP stream"},
	{"read_bw", "tcp_bw", "bw_avg_mib_s", "MiB/s", "RC READ 64 KiB bandwidth vs Go TCP stream"},
	{"write_bw_8", "udp_rate", "msg_rate_mpps", "M/s", "RC WRITE 8 B message rate vs Go UDP 8 B datagrams (one write each, delivered)"},
	{"write_bw_8_busy", "udp_rate", "msg_rate_mpps", "M/s", "RC WRITE 8 B message rate, busy-poll, vs Go UDP 8 B datagrams"},
	{"send_lat", "udp_lat", "t_typical_us", "µs", "RC SEND 8 B latency (one-way, median) vs Go UDP ping-pong"},
	{"send_lat_ev", "udp_lat", "t_typical_us", "µs", "RC SEND 8 B latency, blocked on the completion channel (-e), vs Go UDP ping-pong"},
	{"write_lat", "udp_lat", "t_typical_us", "µs", "RC WRITE 8 B latency (one-way, median) vs Go UDP ping-pong"},
	{"send_lat_busy", "udp_lat_busy", "t_typical_us", "µs", "RC SEND 8 B latency, busy-poll, vs Go UDP spinning ping-pong"},
	{"write_lat_busy", "udp_lat_busy", "t_typical_us", "µs", "RC WRITE 8 B latency, busy-poll, vs Go UDP spinning ping-pong"},
	{"send_lat_busy", "udp_lat_rcwire", "t_typical_us", "µs", "RC SEND 8 B latency, busy-poll, vs the same Go UDP ping-pong sending RC's datagrams (unconnected, DF, an ACK behind each: nettest --rc-wire)"},
	// bench/afxdp.sh: goverbs on AF_XDP against goverbs on the UDP backend (and Go UDP).
	{"xdp_send_lat_busy", "send_lat_busy", "t_typical_us", "µs", "AF_XDP: RC SEND 8 B latency, busy-poll, vs the UDP backend's"},
	{"xdp_send_lat_busy", "udp_lat_busy", "t_typical_us", "µs", "AF_XDP: RC SEND 8 B latency, busy-poll, vs Go UDP spinning ping-pong"},
	{"xdp_write_bw_8", "write_bw_8", "msg_rate_mpps", "M/s", "AF_XDP: RC WRITE 8 B message rate vs the UDP backend's"},
	{"xdp_write_bw_8_busy", "write_bw_8_busy", "msg_rate_mpps", "M/s", "AF_XDP: RC WRITE 8 B message rate, busy-poll, vs the UDP backend's"},
	{"xdp_write_bw", "write_bw", "bw_avg_mib_s", "MiB/s", "AF_XDP: RC WRITE 64 KiB bandwidth vs the UDP backend's"},
	{"tcp_lat", "", "t_typical_us", "µs", "Go TCP 64 B request/response (one-way, median), baseline only"},
	{"tcp_lat_busy", "", "t_typical_us", "µs", "Go TCP 64 B request/response, spinning, baseline only"},
}

func main() {
	dir := flag.String("dir", ".", "directory of result files")
	svg := flag.String("svg", "", "write the size sweep plot here")
	flag.Parse()
	// values returns key by round: a row's "round" field (compare.sh adds it), or its
	// place in the file.
	values := func(name, key string) map[int]float64 {
		rows, err := load(filepath.Join(*dir, name+".json"))
		if err != nil {
			return nil
		}
		v := make(map[int]float64, len(rows))
		for i, r := range rows {
			round := i + 1
			if n, ok := r["round"]; ok {
				round = int(n)
			}
			v[round] = r[key]
		}
		return v
	}
	fmt.Println("| measurement | goverbs | baseline | ratio of medians | per-round ratios | median of per-round ratios | rounds |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, c := range comparisons {
		g := values(c.run, c.key)
		if len(g) == 0 {
			continue
		}
		if c.base == "" {
			fmt.Printf("| %s | | %s | | | | %d |\n", c.what, format(medianOf(slices.Collect(maps.Values(g))), c.unit), len(g))
			continue
		}
		b := values(c.base, c.key)
		if len(b) == 0 {
			continue
		}
		gm, bm := medianOf(slices.Collect(maps.Values(g))), medianOf(slices.Collect(maps.Values(b)))
		rs := perRound(g, b)
		var each []string
		for _, r := range rs {
			each = append(each, fmt.Sprintf("%.2f×", r))
		}
		med := "n/a"
		if len(rs) > 0 {
			med = fmt.Sprintf("%.2f×", medianOf(rs))
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %d |\n", c.what, format(gm, c.unit), format(bm, c.unit),
			ratio(gm, bm), strings.Join(each, " "), med, len(each))
	}
	fmt.Println()
	fmt.Println("Ratios are goverbs ÷ baseline: above 1 is better for bandwidth and message rate, below 1 for latency.")
	if *svg != "" {
		if err := plot(*dir, *svg); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
}

// perRound returns, in round order, the ratio of each round of a run to the same round of
// its baseline: the rounds are interleaved, so a slow spell of the machine that slows
// both cancels out. A round that either side lacks (a failed run) or whose baseline is
// zero is left out.
func perRound(run, base map[int]float64) []float64 {
	var rs []float64
	for _, round := range slices.Sorted(maps.Keys(run)) {
		if b, ok := base[round]; ok && b > 0 {
			rs = append(rs, run[round]/b)
		}
	}
	return rs
}

// ratio prints goverbs' figure as a multiple of its baseline's.
func ratio(run, base float64) string {
	if base <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", run/base)
}

// format prints a figure with its unit, message rates to three decimals.
func format(v float64, unit string) string {
	if unit == "M/s" {
		return fmt.Sprintf("%.3f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// medianOf returns the median of v (sorting a copy).
func medianOf(v []float64) float64 {
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// plot draws bandwidth (MiB/s) against message size (log2 axis) for each sweep file.
func plot(dir, out string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "sweep_*.json"))
	sort.Strings(files)
	if len(files) == 0 {
		return fmt.Errorf("no sweep_*.json in %s", dir)
	}
	type series struct {
		name string
		pts  [][2]float64
	}
	var all []series
	maxBW, minX, maxX := 0.0, math.Inf(1), math.Inf(-1)
	for _, f := range files {
		rows, err := load(f)
		if err != nil {
			return err
		}
		s := series{name: strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "sweep_"), ".json")}
		for _, r := range rows {
			x := math.Log2(r["bytes"])
			s.pts = append(s.pts, [2]float64{x, r["bw_avg_mib_s"]})
			maxBW = math.Max(maxBW, r["bw_avg_mib_s"])
			minX, maxX = math.Min(minX, x), math.Max(maxX, x)
		}
		all = append(all, s)
	}
	const W, H, L, R, T, B = 720.0, 420.0, 70.0, 20.0, 30.0, 50.0
	px := func(x float64) float64 { return L + (x-minX)/(maxX-minX)*(W-L-R) }
	py := func(y float64) float64 { return H - B - y/maxBW*(H-T-B) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&sb, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&sb, `<text x="%.0f" y="18" font-size="14">Bandwidth vs message size, two processes on loopback (MiB/s)</text>`+"\n", L)
	for x := math.Ceil(minX); x <= maxX; x += 2 {
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			px(x), T, px(x), H-B, px(x), H-B+16, sizeLabel(math.Exp2(x)))
	}
	for i := 0; i <= 5; i++ {
		y := maxBW * float64(i) / 5
		fmt.Fprintf(&sb, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			L, py(y), W-R, py(y), L-6, py(y)+4, y)
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"}
	for i, s := range all {
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
		}
		c := colors[i%len(colors)]
		fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", L+10, T+16+float64(i)*16, c, s.name)
	}
	fmt.Fprintf(&sb, `<text x="%.0f" y="%.0f" text-anchor="middle">message size (bytes)</text>`+"\n", (L+W-R)/2, H-12)
	sb.WriteString("</svg>\n")
	return os.WriteFile(out, []byte(sb.String()), 0o644)
}

func sizeLabel(n float64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.0fM", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0fK", n/(1<<10))
	}
	return fmt.Sprintf("%.0f", n)
}
