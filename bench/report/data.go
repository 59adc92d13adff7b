package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
)

type row map[string]float64

func load(path string) ([]row, error) {
	var rows []row
	err := loadInto(path, &rows)
	return rows, err
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

// format prints a figure with its unit, message rates to three decimals and latencies
// under a microsecond to two.
func format(v float64, unit string) string {
	switch {
	case unit == "M/s":
		return fmt.Sprintf("%.3f %s", v, unit)
	case unit == "µs" && v < 1:
		// A sub-microsecond latency (a same-host busy ping-pong, the shared-memory
		// floor beside it) would round to a tenth, a third of what it is.
		return fmt.Sprintf("%.2f %s", v, unit)
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

// loadInto decodes every JSON line of path into a new element of *out, skipping lines
// that are not JSON objects, as load does.
func loadInto[T any](path string, out *[]T) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		*out = append(*out, v)
	}
	return sc.Err()
}

// meta is how and where a run was made: bench/meta.sh writes it as meta.json beside the
// run's rows, from the machine the run was made on.
type meta struct {
	Command string `json:"command"` // what reproduces the run
	Date    string `json:"date"`    // UTC, when the run started
	Commit  string `json:"commit"`  // git describe of the tree measured
	Go      string `json:"go"`
	Kernel  string `json:"kernel"`
	CPU     string `json:"cpu"`
	Cores   int    `json:"cores"`
	Load    string `json:"load"` // /proc/loadavg's first three fields when the run started
}

// loadMeta reads dir/meta.json; a run without one is described as unknown.
func loadMeta(dir string) meta {
	var ms []meta
	if err := loadInto(dir+"/meta.json", &ms); err != nil || len(ms) == 0 {
		return meta{}
	}
	return ms[len(ms)-1]
}

// String describes the run in one paragraph.
func (m meta) String() string {
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	cores := "unknown"
	if m.Cores > 0 {
		cores = fmt.Sprint(m.Cores)
	}
	return fmt.Sprintf("Run %s at commit %s, on %s cores of %s, Linux %s, %s (load average at the start: %s). Reproduce: `%s`",
		or(m.Date), or(m.Commit), cores, or(m.CPU), or(m.Kernel), or(m.Go), or(m.Load), or(m.Command))
}
