package main

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

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
	{"xdp_send_lat_busy_generic", "send_lat_busy", "t_typical_us", "µs", "AF_XDP, generic XDP (+generic): RC SEND 8 B latency, busy-poll, vs the UDP backend's"},
	{"xdp_send_lat_busy_generic", "udp_lat_busy", "t_typical_us", "µs", "AF_XDP, generic XDP (+generic): RC SEND 8 B latency, busy-poll, vs Go UDP spinning ping-pong"},
	{"xdp_send_lat_busy", "udp_lat_rcwire", "t_typical_us", "µs", "AF_XDP: RC SEND 8 B latency, busy-poll, vs Go UDP spinning ping-pong sending RC's datagrams (nettest --rc-wire)"},
	{"xdp_write_bw_8", "udp_rate", "msg_rate_mpps", "M/s", "AF_XDP: RC WRITE 8 B message rate vs Go UDP 8 B datagrams (one write each, delivered)"},
	{"xdp_write_bw_8_busy", "udp_rate", "msg_rate_mpps", "M/s", "AF_XDP: RC WRITE 8 B message rate, busy-poll, vs Go UDP 8 B datagrams"},
	{"xdp_write_bw", "tcp_bw", "bw_avg_mib_s", "MiB/s", "AF_XDP: RC WRITE 64 KiB bandwidth vs Go TCP stream"},
	// The UDP backend with each datagram a packet of its own on the veth pair
	// (gso_max_segs 1), as on a wire: by default veth carries its GSO runs whole.
	{"xdp_write_bw_8", "write_bw_8_seg", "msg_rate_mpps", "M/s", "AF_XDP: RC WRITE 8 B message rate vs the UDP backend's, each datagram a packet on the veth (gso_max_segs 1)"},
	{"xdp_write_bw", "write_bw_seg", "bw_avg_mib_s", "MiB/s", "AF_XDP: RC WRITE 64 KiB bandwidth vs the UDP backend's, each datagram a packet on the veth (gso_max_segs 1)"},
	{"write_bw_8_seg", "write_bw_8", "msg_rate_mpps", "M/s", "UDP backend: RC WRITE 8 B message rate, each datagram a packet on the veth, vs its GSO runs carried whole"},
	{"write_bw_seg", "write_bw", "bw_avg_mib_s", "MiB/s", "UDP backend: RC WRITE 64 KiB bandwidth, each datagram a packet on the veth, vs its GSO runs carried whole"},
	// bench/attach.sh: a process attached to goverbs serve against the in-process device.
	{"attach_send_lat_busy", "send_lat_busy", "t_typical_us", "µs", "Attached to goverbs serve: RC SEND 8 B latency, busy-poll, vs the in-process device's"},
	{"attach_send_lat", "send_lat", "t_typical_us", "µs", "Attached to goverbs serve: RC SEND 8 B latency vs the in-process device's"},
	{"attach_write_bw", "write_bw", "bw_avg_mib_s", "MiB/s", "Attached to goverbs serve: RC WRITE 64 KiB bandwidth vs the in-process device's"},
	{"attach_own_send_lat_busy", "send_lat_busy", "t_typical_us", "µs", "Attached, each process running its own engine on the daemon's address: RC SEND 8 B latency, busy-poll, vs the in-process device's"},
	{"attach_own_send_lat", "send_lat", "t_typical_us", "µs", "Attached, own engine: RC SEND 8 B latency vs the in-process device's"},
	{"attach_own_write_bw", "write_bw", "bw_avg_mib_s", "MiB/s", "Attached, own engine: RC WRITE 64 KiB bandwidth vs the in-process device's"},
	{"attach_own_send_lat_busy", "attach_send_lat_busy", "t_typical_us", "µs", "Attached: RC SEND 8 B latency, busy-poll, own engine vs the daemon's engine"},
	{"attach_own_write_bw", "attach_write_bw", "bw_avg_mib_s", "MiB/s", "Attached: RC WRITE 64 KiB bandwidth, own engine vs the daemon's engine"},
	// bench/samehost.sh: the same-host shortcut against the UDP path and a unix socket.
	{"shm_send_lat_busy", "send_lat_busy", "t_typical_us", "µs", "Same host: RC SEND 8 B latency, busy-poll, shared memory vs goverbs over UDP"},
	{"shm_send_lat_busy", "shm_lat", "t_typical_us", "µs", "Same host: RC SEND 8 B latency, busy-poll, shared memory vs the machine's floor: 8 B to another process and back through shared memory, both spinning (nettest shm_lat)"},
	{"shm_send_lat_ev", "unix_lat", "t_typical_us", "µs", "Same host: RC SEND 8 B latency, -e, shared memory vs Go unix-socket ping-pong"},
	{"send_lat_ev", "unix_lat", "t_typical_us", "µs", "Same host: RC SEND 8 B latency, -e, over UDP vs Go unix-socket ping-pong"},
	{"shm_write_bw", "write_bw", "bw_avg_mib_s", "MiB/s", "Same host: RC WRITE 64 KiB bandwidth, shared memory vs goverbs over UDP"},
	{"shm_write_bw_8", "write_bw_8", "msg_rate_mpps", "M/s", "Same host: RC WRITE 8 B message rate, shared memory vs goverbs over UDP"},
	{"shm_write_bw_8_busy", "write_bw_8_busy", "msg_rate_mpps", "M/s", "Same host: RC WRITE 8 B message rate, busy-poll, shared memory vs goverbs over UDP"},
	{"shm_write_bw_8", "udp_rate", "msg_rate_mpps", "M/s", "Same host: RC WRITE 8 B message rate, shared memory, vs Go UDP 8 B datagrams (one write each, delivered)"},
	{"shm_write_bw_8_busy", "udp_rate", "msg_rate_mpps", "M/s", "Same host: RC WRITE 8 B message rate, busy-poll, shared memory, vs Go UDP 8 B datagrams"},
	{"shm_send_lat_busy", "tcp_lat_busy_8", "t_typical_us", "µs", "Same host: RC SEND 8 B latency, busy-poll, shared memory vs Go TCP 8 B ping-pong, spinning"},
	{"shm_write_bw", "tcp_bw", "bw_avg_mib_s", "MiB/s", "Same host: RC WRITE 64 KiB bandwidth, shared memory vs Go TCP stream"},
	{"tcp_lat", "", "t_typical_us", "µs", "Go TCP 64 B request/response (one-way, median), baseline only"},
	{"tcp_lat_busy", "", "t_typical_us", "µs", "Go TCP 64 B request/response, spinning, baseline only"},
}

// values returns key by round from DIR/NAME.json: a row's "round" field (the scripts add
// it), or its place in the file. Nil if the file is missing or unreadable.
func values(dir, name, key string) map[int]float64 {
	rows, err := load(filepath.Join(dir, name+".json"))
	if err != nil || len(rows) == 0 {
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

// compareTable writes bench/compare.sh's table: each goverbs figure beside its baseline,
// the ratio of the medians, each round's ratio and their median. It reports whether the
// directory held any row of the table.
func compareTable(w io.Writer, dir string) bool {
	var lines, phased []string
	top := topProbe(dir)
	for _, c := range comparisons {
		g := values(dir, c.run, c.key)
		if len(g) == 0 {
			continue
		}
		if c.base == "" {
			lines = append(lines, fmt.Sprintf("| %s | | %s | | | | %d |", c.what,
				format(medianOf(slices.Collect(maps.Values(g))), c.unit), len(g)))
			continue
		}
		b := values(dir, c.base, c.key)
		if len(b) == 0 {
			continue
		}
		gm, bm := medianOf(slices.Collect(maps.Values(g))), medianOf(slices.Collect(maps.Values(b)))
		rs := perRound(g, b)
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %d |", c.what,
			format(gm, c.unit), format(bm, c.unit), ratio(gm, bm), ratios(rs), medianRatio(rs), len(rs)))
		if f, ok := fastMedian(dir, c.run, c.base, g, b, top); ok {
			phased = append(phased, c.what+" "+f)
		}
	}
	if len(lines) == 0 {
		return false
	}
	fmt.Fprintln(w, "| measurement | goverbs | baseline | ratio of medians | per-round ratios | median of per-round ratios | rounds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios are goverbs ÷ baseline: above 1 is better for bandwidth and message rate, below 1 for latency.")
	phaseLine(w, top, phased)
	return true
}

// fastMedian is the median ratio of run's figures g to base's b over the rounds whose
// bench/xcore probes, in dir's rows of both, all saw the machine's fast phase (half of
// top or more), with how many rounds those were; false when none were.
func fastMedian(dir, run, base string, g, b map[int]float64, top float64) (string, bool) {
	if top <= 0 {
		return "", false
	}
	fast := fastRounds(probes(dir, run), probes(dir, base), top)
	if len(fast) == 0 {
		return "", false
	}
	fr := perRound(only(g, fast), only(b, fast))
	return fmt.Sprintf("%s (%d of %d rounds)", medianRatio(fr), len(fr), len(perRound(g, b))), true
}

// phaseLine writes, under a table whose rows carry bench/xcore's probes (top > 0), its
// measurements' fastMedian figures, or that no round stayed in the fast phase.
func phaseLine(w io.Writer, top float64, phased []string) {
	if top <= 0 {
		return
	}
	fmt.Fprintln(w)
	if len(phased) == 0 {
		fmt.Fprintf(w, "No round stayed in the machine's fast phase from the first run's start to the second's end (`bench/xcore`, run before and after each run, reached half its fastest probe, %.1f GB/s, every time in none of them; on a VM the rate at which data crosses between the cores has phases 4-5× apart, lasting seconds).\n", top)
		return
	}
	fmt.Fprintf(w, "The median of per-round ratios over the rounds in which `bench/xcore`, run before and after each of the two runs, saw the machine move data between its cores at its fast rate every time (at least half the run's fastest probe, %.1f GB/s; on a VM the rate has phases 4-5× apart, lasting seconds): %s.\n",
		top, strings.Join(phased, "; "))
}

// probes returns the bench/xcore figures bench/lib.sh's pair recorded before and after
// each round's run of DIR/NAME.json (xcore_before, xcore_after), by round: nil when
// the rows have none.
func probes(dir, name string) map[int][]float64 {
	rows, err := load(filepath.Join(dir, name+".json"))
	if err != nil {
		return nil
	}
	var p map[int][]float64
	for i, r := range rows {
		round := i + 1
		if n, ok := r["round"]; ok {
			round = int(n)
		}
		for _, k := range []string{"xcore_before", "xcore_after"} {
			if v, ok := r[k]; ok {
				if p == nil {
					p = map[int][]float64{}
				}
				p[round] = append(p[round], v)
			}
		}
	}
	return p
}

// topProbe is the fastest bench/xcore figure any row under dir recorded, 0 without.
func topProbe(dir string) float64 {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	top := 0.0
	for _, f := range files {
		top = max(top, maxProbe(probes(dir, strings.TrimSuffix(filepath.Base(f), ".json"))))
	}
	return top
}

// maxProbe is the fastest figure of some runs' probes, 0 without.
func maxProbe(runs ...map[int][]float64) float64 {
	top := 0.0
	for _, m := range runs {
		for _, ps := range m {
			for _, v := range ps {
				top = max(top, v)
			}
		}
	}
	return top
}

// Phases of a round, by its probes (phaseOf).
const (
	phaseFast  = "fast"
	phaseSlow  = "slow"
	phaseMixed = "mixed"
)

// phaseOf says which phase a round's probes saw, against the run's fastest probe, top:
// fast when every probe reached half of it, slow when none did, mixed otherwise. The
// phases this separates are 4-5× apart (bench/xcore); noise within one is not.
func phaseOf(probes []float64, top float64) string {
	fast := 0
	for _, v := range probes {
		if v >= top/2 {
			fast++
		}
	}
	switch fast {
	case len(probes):
		return phaseFast
	case 0:
		return phaseSlow
	}
	return phaseMixed
}

// fastRounds returns the rounds in which both runs were probed and every probe saw
// the fast phase.
func fastRounds(run, base map[int][]float64, top float64) map[int]bool {
	fast := map[int]bool{}
	for round, ps := range run {
		if bs, ok := base[round]; ok && phaseOf(append(append([]float64(nil), ps...), bs...), top) == phaseFast {
			fast[round] = true
		}
	}
	return fast
}

// only keeps the rounds of v that keep names.
func only(v map[int]float64, keep map[int]bool) map[int]float64 {
	o := map[int]float64{}
	for r, x := range v {
		if keep[r] {
			o[r] = x
		}
	}
	return o
}

// vethTable writes bench/veth.sh's table, one row per MTU directory (mtu1500, mtu9000)
// under dir: RC WRITE 64 KiB against the Go TCP stream over the same veth pair.
func vethTable(w io.Writer, dir string) bool {
	mtus, _ := filepath.Glob(filepath.Join(dir, "mtu*"))
	slices.SortFunc(mtus, func(a, b string) int { return mtuOf(a) - mtuOf(b) })
	var lines, phased []string
	top := 0.0
	for _, m := range mtus {
		top = max(top, topProbe(m))
	}
	for _, m := range mtus {
		g := values(m, "write_bw", "bw_avg_mib_s")
		b := values(m, "tcp_bw", "bw_avg_mib_s")
		if len(g) == 0 || len(b) == 0 {
			continue
		}
		gm, bm := medianOf(slices.Collect(maps.Values(g))), medianOf(slices.Collect(maps.Values(b)))
		rs := perRound(g, b)
		mtu := mtuOf(m)
		lines = append(lines, fmt.Sprintf("| %d (%d) | %s | %s | %s | %s | %s | %d |", mtu, ibMTU(mtu),
			format(gm, "MiB/s"), format(bm, "MiB/s"), ratio(gm, bm), ratios(rs), medianRatio(rs), len(rs)))
		if f, ok := fastMedian(m, "write_bw", "tcp_bw", g, b, top); ok {
			phased = append(phased, fmt.Sprintf("MTU %d %s", mtu, f))
		}
	}
	if len(lines) == 0 {
		return false
	}
	fmt.Fprintln(w, "| interface MTU (IB MTU) | RC WRITE 64 KiB | Go TCP stream | ratio of medians | per-round ratios | median of per-round ratios | rounds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	phaseLine(w, top, phased)
	return true
}

func mtuOf(dir string) int {
	var n int
	fmt.Sscanf(strings.TrimPrefix(filepath.Base(dir), "mtu"), "%d", &n)
	return n
}

// ibMTU is the IB MTU a RoCEv2 device takes from an interface MTU, as rxe does: the
// interface MTU less 80 bytes of headers, rounded down to 256, 512, ... 4096.
func ibMTU(ifMTU int) int {
	best := 0
	for m := 256; m <= 4096; m *= 2 {
		if m <= ifMTU-80 {
			best = m
		}
	}
	return best
}

// rstreamRow is one line of bench/rstream.sh's rstream.json: one variant's two figures
// in one round and mode (loopback, veth or inproc; rows from before the modes are
// loopback's). The variant write_bw is goverbs' RC WRITE 64 KiB, bandwidth only.
type rstreamRow struct {
	Round   int     `json:"round"`
	Mode    string  `json:"mode"`
	Variant string  `json:"variant"`
	BW      float64 `json:"bw_gbps"`
	RR      float64 `json:"rr_us"`
	// XCore is the machine's cross-core copy rate (bench/xcore, GB/s) just before and
	// just after the row's stream ran, where the script measured it (bench/rspreload.sh).
	XCore []float64 `json:"xcore_gbps"`
}

// rstreamModes names bench/rstream.sh's placements.
var rstreamModes = map[string]string{
	"loopback": "Two processes on loopback",
	"veth":     "Two processes in two namespaces, a veth pair at MTU 1500",
	"inproc":   "Both ends in one process (`rstream --loop`)",
	"preload":  "Unmodified programs, two processes on loopback: `iperf3` (its default 128 KiB writes) and `sockperf ping-pong --tcp -m 64` under librspreload.so on the drop-in's rsockets, against the same programs on the kernel's TCP (bench/rspreload.sh)",
}

// rstreamBaseline names each mode's baseline row: Go's net.TCPConn for rdmanet, the
// kernel's TCP under the same C program for librspreload's.
func rstreamBaseline(mode string) string {
	if mode == "preload" {
		return "kernel TCP (same program)"
	}
	return "Go TCP"
}

// rstreamTable writes bench/rstream.sh's tables: per mode and variant (rdmanet at each
// revision, then Go TCP) the medians, each round's ratio to TCP's and their median;
// then rdmanet's loopback stream against write_bw's in the same rounds.
func rstreamTable(w io.Writer, dir string) bool {
	var rows []rstreamRow
	if err := loadInto(filepath.Join(dir, "rstream.json"), &rows); err != nil || len(rows) == 0 {
		return false
	}
	type series struct {
		bw, rr map[int]float64
		xcore  map[int][]float64
	}
	var modes []string
	order := map[string][]string{}
	data := map[string]map[string]*series{}
	for _, r := range rows {
		if r.Mode == "" {
			r.Mode = "loopback"
		}
		if data[r.Mode] == nil {
			modes = append(modes, r.Mode)
			data[r.Mode] = map[string]*series{}
		}
		sr := data[r.Mode][r.Variant]
		if sr == nil {
			sr = &series{map[int]float64{}, map[int]float64{}, map[int][]float64{}}
			data[r.Mode][r.Variant] = sr
			order[r.Mode] = append(order[r.Mode], r.Variant)
		}
		sr.bw[r.Round], sr.rr[r.Round] = r.BW, r.RR
		if len(r.XCore) > 0 {
			sr.xcore[r.Round] = r.XCore
		}
	}
	printed := false
	for _, m := range modes {
		tcp := data[m]["tcp"]
		if tcp == nil {
			continue
		}
		if printed {
			fmt.Fprintln(w)
		}
		if len(modes) > 1 || m != "loopback" {
			title := rstreamModes[m]
			if title == "" {
				title = m
			}
			fmt.Fprintf(w, "%s:\n\n", title)
		}
		stream := "stream 64 KiB"
		if m == "preload" {
			stream = "iperf3 stream" // its default writes, 128 KiB
		}
		fmt.Fprintf(w, "| variant | %s Gb/s (median) | ÷ TCP per round | median ratio | 64 B req/resp µs one-way (median) | ÷ TCP per round | median ratio |\n", stream)
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		for _, v := range order[m] {
			sr := data[m][v]
			if v == "write_bw" {
				continue
			}
			mb, mr := medianOf(slices.Collect(maps.Values(sr.bw))), medianOf(slices.Collect(maps.Values(sr.rr)))
			if v == "tcp" {
				fmt.Fprintf(w, "| %s | %.2f | | | %.2f | | |\n", rstreamBaseline(m), mb, mr)
				continue
			}
			xb, xr := perRound(sr.bw, tcp.bw), perRound(sr.rr, tcp.rr)
			fmt.Fprintf(w, "| %s | %.2f | %s | %s | %.2f | %s | %s |\n", v, mb, ratios(xb), medianRatio(xb), mr, ratios(xr), medianRatio(xr))
		}
		for _, v := range order[m] {
			if sr := data[m][v]; v != "tcp" && v != "write_bw" && len(sr.xcore) > 0 && len(tcp.xcore) > 0 {
				phaseNote(w, v, sr.bw, tcp.bw, sr.xcore, tcp.xcore)
			}
		}
		printed = true
	}
	if wb := data["loopback"]["write_bw"]; wb != nil && printed {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "The loopback stream against goverbs' `write_bw -s 65536` (RC WRITE, what the stream rides on), same rounds:")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| variant | stream Gb/s (median) | write_bw Gb/s (median) | ÷ write_bw per round | median ratio |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
		for _, v := range order["loopback"] {
			if v == "write_bw" || v == "tcp" {
				continue
			}
			sr := data["loopback"][v]
			x := perRound(sr.bw, wb.bw)
			fmt.Fprintf(w, "| %s | %.2f | %.2f | %s | %s |\n", v, medianOf(slices.Collect(maps.Values(sr.bw))),
				medianOf(slices.Collect(maps.Values(wb.bw))), ratios(x), medianRatio(x))
		}
	}
	return printed
}

// phaseNote writes, under a stream table whose runs were framed by bench/xcore's
// probes, each round's probes and the stream's ratio to TCP's again, over the rounds
// whose probes all saw the machine's fast phase and over those that all saw its slow
// one (phaseOf).
func phaseNote(w io.Writer, v string, bw, tcpBW map[int]float64, xc, tcpXC map[int][]float64) {
	top := maxProbe(xc, tcpXC)
	if top <= 0 {
		return
	}
	var each []string
	by := map[string][]float64{}
	for _, r := range slices.Sorted(maps.Keys(bw)) {
		t, ok := tcpBW[r]
		ps := append(append([]float64(nil), tcpXC[r]...), xc[r]...)
		if !ok || t <= 0 || len(ps) == 0 {
			continue
		}
		x, phase := bw[r]/t, phaseOf(ps, top)
		by[phase] = append(by[phase], x)
		each = append(each, fmt.Sprintf("%d: %.2f× %s (TCP %s, %s %s)", r, x, phase, probeList(tcpXC[r]), v, probeList(xc[r])))
	}
	fast, slow, mixed := by[phaseFast], by[phaseSlow], by[phaseMixed]
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The machine's phase around each stream run, `bench/xcore`'s cross-core copy rate in GB/s before and after it, and the round's ratio: %s. ", strings.Join(each, "; "))
	fmt.Fprintf(w, "Rounds whose probes all saw the fast phase: %d, median ratio %s; all the slow phase: %d, %s; the phase changed within the round: %d, %s.\n",
		len(fast), medianRatio(fast), len(slow), medianRatio(slow), len(mixed), medianRatio(mixed))
}

// probeList prints a run's xcore probes, before→after.
func probeList(ps []float64) string {
	each := make([]string, len(ps))
	for i, p := range ps {
		each[i] = fmt.Sprintf("%.1f", p)
	}
	return strings.Join(each, "→")
}

// ratios prints each round's ratio, in round order.
func ratios(rs []float64) string {
	each := make([]string, len(rs))
	for i, r := range rs {
		each[i] = fmt.Sprintf("%.2f×", r)
	}
	return strings.Join(each, " ")
}

// medianRatio prints the median of the per-round ratios.
func medianRatio(rs []float64) string {
	if len(rs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", medianOf(rs))
}

// syscallRow is one line of bench/afxdp.sh's syscalls.json: one more run of a test with
// its client under perf stat, after the timed rounds (the counting would slow them):
// the client's system calls and context switches, and the iterations its own row
// reported (round trips for latency, messages for a rate, 64 KiB writes for bandwidth).
type syscallRow struct {
	Test       string  `json:"test"`
	Syscalls   float64 `json:"syscalls"`
	Switches   float64 `json:"context_switches"`
	Iterations float64 `json:"iterations"`
}

// syscallTable writes the per-iteration system calls and context switches of
// syscalls.json, in the order of the file; it reports whether there were any.
func syscallTable(w io.Writer, dir string) bool {
	var rows []syscallRow
	if err := loadInto(filepath.Join(dir, "syscalls.json"), &rows); err != nil || len(rows) == 0 {
		return false
	}
	fmt.Fprintln(w, "| test (client side, one counted run) | iterations | system calls per iteration | context switches per iteration |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range rows {
		if r.Iterations <= 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %.3f |\n", r.Test, r.Iterations, r.Syscalls/r.Iterations, r.Switches/r.Iterations)
	}
	return true
}

// compareSyscallTable writes the comparisons found in dir, then the system calls per
// iteration of its counted runs (syscalls.json, bench/lib.sh's count_pair), if it has
// any: bench/afxdp.sh's and bench/samehost.sh's tables (bench/compare.sh's counts none).
func compareSyscallTable(w io.Writer, dir string) bool {
	if !compareTable(w, dir) {
		return false
	}
	var t strings.Builder
	if syscallTable(&t, dir) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "System calls and context switches of the client, from one more run of each test under `perf stat -e raw_syscalls:sys_enter,context-switches` after the rounds (an iteration is a round trip for latency, a message for a rate, a 64 KiB write for bandwidth):")
		fmt.Fprintln(w)
		fmt.Fprint(w, t.String())
	}
	return true
}
