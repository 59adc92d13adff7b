package rstream

import (
	"fmt"
	"io"
	"time"
)

// showPerf prints one row as rstream's show_perf: bytes count both directions,
// Gb/sec is 10^9 bits, usec/xfer is the time of one transfer one way.
func showPerf(w io.Writer, t test, d time.Duration) {
	usec := float64(d.Nanoseconds()) / 1e3
	bytes := int64(t.iterations) * int64(t.count) * int64(t.size) * 2
	fmt.Fprintf(w, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", t.name, sizeStr(int64(t.size)),
		cntStr(int64(t.count)), cntStr(int64(t.iterations)), sizeStr(bytes),
		usec/1e6, float64(bytes)*8/(1000*usec), usec/float64(t.iterations)/float64(t.count*2))
}

// sizeStr is librdmacm's size_str: 64, 1.5k, 4k, 1m; one decimal below 10.
func sizeStr(n int64) string {
	base, mag := int64(1), ""
	switch {
	case n >= 1<<30:
		base, mag = 1<<30, "g"
	case n >= 1<<20:
		base, mag = 1<<20, "m"
	case n >= 1<<10:
		base, mag = 1<<10, "k"
	}
	if n/base < 10 {
		if frac := n % base * 10 / base; frac != 0 {
			return fmt.Sprintf("%d.%d%s", n/base, frac, mag)
		}
	}
	return fmt.Sprintf("%d%s", n/base, mag)
}

// cntStr is librdmacm's cnt_str: 100k, 1m, in powers of ten.
func cntStr(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprintf("%d", n)
}
