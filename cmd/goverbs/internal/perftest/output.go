package perftest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

const resultLine = "---------------------------------------------------------------------------------------"

// printer writes a perf tool's human table, or with --json one object per row.
type printer struct {
	w     io.Writer
	json  bool
	gbits bool
	cpu   bool // --cpu_util: a CPU column
}

func (p *printer) textf(format string, args ...any) {
	if !p.json {
		fmt.Fprintf(p.w, format, args...)
	}
}

// bwRow is one line of a bandwidth table.
type bwRow struct {
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	PeakMiB    float64 `json:"bw_peak_mib_s"`
	AvgMiB     float64 `json:"bw_avg_mib_s"`
	MsgRate    float64 `json:"msg_rate_mpps"`
	CPU        float64 `json:"cpu_util_pct,omitempty"` // --cpu_util: this process's CPU use
}

func (p *printer) bwHeader() {
	unit := "MiB/sec"
	if p.gbits {
		unit = "Gb/sec"
	}
	p.textf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]", unit, unit)
	if p.cpu {
		p.textf("    CPU_Util[%%]")
	}
	p.textf("\n")
}

// gbits converts MiB/s to Gb/s.
func gbits(mib float64) float64 { return mib * (1 << 20) * 8 / 1e9 }

func (p *printer) bwRow(r bwRow) {
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	peak, avg := r.PeakMiB, r.AvgMiB
	if p.gbits {
		peak, avg = gbits(peak), gbits(avg)
	}
	fmt.Fprintf(p.w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f", r.Bytes, r.Iterations, peak, avg, r.MsgRate)
	if p.cpu {
		fmt.Fprintf(p.w, "\t    %-3.2f", r.CPU)
	}
	fmt.Fprintln(p.w)
}

// latRow is one line of a latency table, in microseconds.
type latRow struct {
	Bytes      int     `json:"bytes"`
	Iterations int     `json:"iterations"`
	Min        float64 `json:"t_min_us"`
	Max        float64 `json:"t_max_us"`
	Typical    float64 `json:"t_typical_us"`
	Avg        float64 `json:"t_avg_us"`
	Stdev      float64 `json:"t_stdev_us"`
	P99        float64 `json:"p99_us"`
	P999       float64 `json:"p999_us"`

	samples []time.Duration // as measured, for -H and -U
	div     float64         // 2: samples are round trips, reported one-way
}

func (p *printer) latHeader() {
	p.textf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n")
}

func (p *printer) latRow(r latRow) {
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	fmt.Fprintf(p.w, " %-7d %-10d    %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Bytes, r.Iterations, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
}

// histogram prints every sample of a latency row as perftest's -H and -U do: a
// "#, usec" header and one "index, time" line per sample, sorted unless -U.
func (p *printer) histogram(r latRow, sorted bool) {
	us := make([]float64, len(r.samples))
	for i, s := range r.samples {
		us[i] = float64(s.Nanoseconds()) / 1e3 / r.div
	}
	if sorted {
		sort.Float64s(us)
	}
	p.textf("#, usec\n")
	for i, v := range us {
		p.textf("%d, %g\n", i+1, v)
	}
}

// cpuPercent is the CPU time used over a wall-clock interval, in percent of one core.
func cpuPercent(before, after, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * float64(after-before) / float64(wall)
}

// latStats turns samples into a table row; div is 2 for round trips reported one-way.
func latStats(size, iters int, samples []time.Duration, div float64) latRow {
	r := latRow{Bytes: size, Iterations: iters, samples: samples, div: div}
	if len(samples) == 0 {
		return r
	}
	us := make([]float64, len(samples))
	for i, s := range samples {
		us[i] = float64(s.Nanoseconds()) / 1e3 / div
	}
	sort.Float64s(us)
	n := len(us)
	var sum float64
	for _, v := range us {
		sum += v
	}
	r.Avg = sum / float64(n)
	var sq float64
	for _, v := range us {
		sq += (v - r.Avg) * (v - r.Avg)
	}
	r.Stdev = math.Sqrt(sq / float64(n))
	r.Min, r.Max, r.Typical = us[0], us[n-1], us[n/2]
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(n))) - 1
		return us[max(0, min(i, n-1))]
	}
	r.P99, r.P999 = pct(0.99), pct(0.999)
	return r
}

// bwStats computes a bandwidth row. marks are (messages completed, time) points in
// completion order, starting with (0, start).
type mark struct {
	n int
	t time.Time
}

// addMark records m after marks, the first fixed of which stay as they are: all of
// them when the peak is wanted (bwStats looks at every stretch between two), otherwise
// only the newest after the fixed ones, which is all an average needs. A loop that
// kept every point of a run without a peak (every -D run) grew its slice by a point
// per poll that found completions, one per message above 8 KiB (CQ moderation 1):
// 180000 points, 5.6 MiB, in a 3-second 64 KiB write_bw through the same-host rings,
// whose growing (the copies, the new pages' faults and clearing, the write barriers of
// time.Time's pointer) was 8% of the sender's CPU (perf), the side that bounds that
// stream.
//
// Where the peak is wanted, marks are kept at a spacing in messages that only grows: a
// new mark replaces the newest one (the run's end so far) until it lies as far past the
// one before as that one lies past its own predecessor, and when maxPeakMarks are kept
// every other one goes, doubling the spacing. bwStats looks at every pair of marks,
// quadratic in their number, and a mark per poll made a long -n run's report take
// longer than the run (perftest's own peak is quadratic in the iterations, hence its
// advice to use -N). The peak is over stretches of at least a tenth of the run, which
// marks a 2/maxPeakMarks of the run apart bound within half a percent.
func addMark(marks []mark, fixed int, m mark, all bool) []mark {
	if !all && len(marks) > fixed {
		marks[len(marks)-1] = m
		return marks
	}
	if l := len(marks); all && l-fixed >= 3 {
		if gap := marks[l-2].n - marks[l-3].n; marks[l-1].n-marks[l-2].n < gap {
			marks[l-1] = m
			return marks
		}
		if l-fixed >= maxPeakMarks {
			// Every other one, counted back from the newest, which stays: the spacing
			// doubles up to it, and the rule above keeps the new spacing from there.
			odd := (l - 1 - fixed) % 2
			k := fixed
			for i := fixed + odd; i < l; i += 2 {
				marks[k] = marks[i]
				k++
			}
			marks = marks[:k]
		}
	}
	return append(marks, m)
}

// maxPeakMarks bounds the marks kept for the peak (addMark).
const maxPeakMarks = 4096

func bwStats(size int, marks []mark, noPeak bool) bwRow {
	last := marks[len(marks)-1]
	first := marks[0]
	secs := last.t.Sub(first.t).Seconds()
	r := bwRow{Bytes: size, Iterations: last.n - first.n}
	if secs <= 0 || r.Iterations == 0 {
		return r
	}
	r.AvgMiB = float64(size) * float64(r.Iterations) / secs / (1 << 20)
	r.MsgRate = float64(r.Iterations) / secs / 1e6
	if noPeak {
		return r // perftest reports no peak in duration mode, nor with -N
	}
	// Peak: the best rate over any stretch of at least a tenth of the run, in messages
	// and in time (one poll can return many moderated completions at once, so a
	// stretch short in time would measure the poll, not the wire).
	minN := max(1, r.Iterations/10)
	minT := secs / 10
	for i := 0; i < len(marks); i++ {
		for j := i + 1; j < len(marks); j++ {
			dn := marks[j].n - marks[i].n
			dt := marks[j].t.Sub(marks[i].t).Seconds()
			if dn < minN || dt <= 0 || dt < minT {
				continue
			}
			if v := float64(size) * float64(dn) / dt / (1 << 20); v > r.PeakMiB {
				r.PeakMiB = v
			}
		}
	}
	r.PeakMiB = max(r.PeakMiB, r.AvgMiB)
	return r
}

// gidDecimal prints a GID as perftest does: 16 decimal bytes, at least two digits each.
func gidDecimal(g [16]byte) string {
	parts := make([]string, 16)
	for i, b := range g {
		parts[i] = fmt.Sprintf("%02d", b)
	}
	return strings.Join(parts, ":")
}

func onOff(on bool) string {
	if on {
		return "ON"
	}
	return "OFF"
}
