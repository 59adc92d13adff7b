package main

import (
	"strings"
	"testing"
	"time"
)

// TestGetoptForms: the spellings perftest and rdma-core users type, parsed as getopt_long
// does: a value attached to its short flag, bundled short flags, --long=value.
func TestGetoptForms(t *testing.T) {
	r := runBin(t, 60*time.Second, "write_bw", "--loopback", "--bind="+loopbackBind(t), "-s4096", "-Fq2", "--iters=100", "--report_gbits")
	mustSucceed(t, "write_bw -s4096 -Fq2", r)
	mustContain(t, "write_bw -s4096 -Fq2", r.stdout, " Number of qps   : 2", " 4096       200 ", "BW peak[Gb/sec]")
	// getopt_long takes an unambiguous prefix of a long name, and perftest also
	// accepts --report-histogrm.
	r = runBin(t, 60*time.Second, "send_lat", "--loopback", "--iter=20", "--conn", "UC", "--report-histogrm")
	mustSucceed(t, "send_lat --iter=20 --conn UC --report-histogrm", r)
	mustContain(t, "send_lat --iter --conn", r.stdout, " Connection type : UC", " 2       20 ", "#, usec\n1, ", "\n20, ")
	badInput(t, "option '--r' is ambiguous; possibilities: --run_infinitely --rate_limit --rate_units --rate_limit_type --report_gbits --rx-depth",
		"write_bw", "--loopback", "--r", "5")
}

// TestHelpPages: goverbs help CMD and CMD -h print the same page, the command's own,
// with every flag once and its short and long forms on one line.
func TestHelpPages(t *testing.T) {
	for _, cmd := range []string{"write_bw", "send_lat", "rc_pingpong", "srq_pingpong", "devinfo", "soak"} {
		a := runBin(t, 10*time.Second, "help", cmd)
		b := runBin(t, 10*time.Second, cmd, "-h")
		b2 := runBin(t, 10*time.Second, cmd, "--help")
		mustSucceed(t, "help "+cmd, a)
		mustSucceed(t, cmd+" -h", b)
		if a.stdout != b.stdout || b.stdout != b2.stdout {
			t.Errorf("help %s, %s -h and %s --help differ:\n%s\n---\n%s\n---\n%s", cmd, cmd, cmd, a.stdout, b.stdout, b2.stdout)
		}
		if !strings.HasPrefix(a.stdout, "usage: goverbs "+cmd+" ") {
			t.Errorf("help %s is not its own page:\n%s", cmd, a.stdout)
		}
		seen := map[string]bool{}
		for _, l := range strings.Split(a.stdout, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 || !strings.HasPrefix(f[0], "-") {
				continue
			}
			long := f[0]
			if len(f) > 1 && strings.HasPrefix(f[1], "--") {
				long = f[1]
			}
			if seen[long] {
				t.Errorf("help %s lists %s twice:\n%s", cmd, long, a.stdout)
			}
			seen[long] = true
		}
	}
	r := runBin(t, 10*time.Second, "help", "write_bw")
	mustContain(t, "help write_bw", r.stdout, "  -s, --size SIZE ", "  -b, --bidirectional ")
}

// TestPingpongMemoryFlags: rdma-core's -o -O -P -t -j -N. What a software device does
// anyway works; what it lacks fails with rdma-core's own message.
func TestPingpongMemoryFlags(t *testing.T) {
	srv, cli := pingpongPair(t, "rc", "-n", "20", "-o", "-P", "-N", "-c")
	mustSucceed(t, "rc_pingpong -o -P -N server", srv)
	mustSucceed(t, "rc_pingpong -o -P -N client", cli)
	srv, cli = pingpongPair(t, "srq", "-n", "20", "-q", "2", "-o")
	mustSucceed(t, "srq_pingpong -o server", srv)
	mustSucceed(t, "srq_pingpong -o client", cli)
	badInput(t, "the device doesn't support implicit ODP", "rc_pingpong", "-O")
	badInput(t, "the device isn't completion timestamp capable", "rc_pingpong", "-t")
	badInput(t, "device doesn't support dm allocation", "rc_pingpong", "-j")
	badInput(t, "DM memory region can't be on demand", "rc_pingpong", "-o", "-j")
	badInput(t, "prefetch is valid only with on-demand memory region", "rc_pingpong", "-P")
	badInput(t, "unknown shorthand flag: 'o'", "uc_pingpong", "-o")
}

// TestWaitSend: the latency tools' --wait-send (each send's completion before the
// reply, as perftest's latency tools wait) runs the SEND and WRITE ping-pongs to the end.
func TestWaitSend(t *testing.T) {
	for _, tool := range []string{"send_lat", "write_lat"} {
		r := runBin(t, 60*time.Second, tool, "--loopback", "--bind="+loopbackBind(t), "--wait-send", "-n", "200", "-s", "8")
		mustSucceed(t, tool+" --wait-send", r)
		mustContain(t, tool+" --wait-send", r.stdout, " 8       200 ")
	}
}
