package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

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
