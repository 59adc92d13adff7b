package perftest

import (
	"fmt"
	"io"
	"os"
)

// reporter is what a side tells its user: result rows in the table (or --json), the
// last of them for --out_json, progress and warnings on stderr, and whether the rows met
// -w and -y.
type reporter struct {
	out        *printer
	name       string   // the tool, as stderr lines name it
	o          *options // the flags that shape the report
	lastResult []kv     // the last row printed, for --out_json
	limitErr   error    // -w or -y not met
}

// warnf tells the user on stderr that a setting was changed to make the run work. The
// in-process server of --loopback stays quiet: the client says the same.
func (r *reporter) warnf(format string, args ...any) {
	if r.out.w != io.Discard {
		fmt.Fprintf(os.Stderr, "goverbs %s: %s\n", r.name, fmt.Sprintf(format, args...))
	}
}

// progress reports a long run's steps on stderr.
func (r *reporter) progress(i, n, size int) {
	if n > 1 {
		fmt.Fprintf(os.Stderr, "goverbs %s: [%d/%d] %d bytes\n", r.name, i+1, n, size)
	}
}

// printBW prints a row and checks it against -w and -y.
func (r *reporter) printBW(row bwRow) {
	r.out.bwRow(row)
	r.lastResult = bwResults(row, r.o.gbits, r.o.cpuUtil)
	avg := row.AvgMiB
	if r.o.gbits {
		avg = gbits(avg)
	}
	if r.o.limitBW > 0 && avg < r.o.limitBW && r.limitErr == nil {
		r.limitErr = fmt.Errorf("the bandwidth %.2f is below the limit %.2f (-w)", avg, r.o.limitBW)
	}
	if r.o.limitMR > 0 && row.MsgRate < r.o.limitMR && r.limitErr == nil {
		r.limitErr = fmt.Errorf("the message rate %.6f Mpps is below the limit %.6f (-y)", row.MsgRate, r.o.limitMR)
	}
}

// printLat prints one latency row (and its histogram with -H) and keeps it for --out_json.
func (r *reporter) printLat(row latRow) {
	r.out.latRow(row)
	r.lastResult = latResults(row)
	if r.o.hist {
		r.out.histogram(row, !r.o.unsorted)
	}
}

// finish prints the closing line, writes --out_json's file with testInfo (the header's
// facts) and the last row, and fails the run if -w or -y was not met.
func (r *reporter) finish(testInfo func() []kv) error {
	r.out.textf("%s\n", resultLine)
	if r.o.outJSON && r.lastResult != nil {
		if err := writeJSONFile(r.o.jsonFile, testInfo(), r.lastResult); err != nil {
			return err
		}
	}
	return r.limitErr
}
