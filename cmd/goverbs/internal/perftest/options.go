package perftest

import (
	"fmt"
	"os"
	"strings"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/exchange"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// The perf tools' options: perftest's flags with its names and defaults
// (perftest_parameters.c), registered per test as perftest's usage lists them.

type options struct {
	dev      tool.DevOpts
	port     int
	size     int
	sizeSet  bool // -s given: UD does not lower it to the MTU silently
	iters    int
	all      bool
	duration int
	infinite bool // --run_infinitely: a row every -D seconds until Ctrl-C
	numQP    int
	conn     string
	mtu      int
	txDepth  int
	rxDepth  int
	inline   int
	outs     int
	cqMod    int
	postList int
	bidir    bool
	events   bool
	noPeak   bool
	srq      bool
	timeout  int
	atomic   string // -A: FETCH_AND_ADD or CMP_AND_SWAP
	gbits    bool
	json     bool
	outJSON  bool
	jsonFile string
	cpuUtil  bool
	limitBW  float64
	limitMR  float64
	rate     float64 // --rate_limit, in rateUnit
	rateUnit string
	rateType string
	cycles   bool
	hist     bool
	unsorted bool
	waitSend bool // --wait-send: each send's completion before the reply (perftest's tx depth 1)
	loopback bool
	cpuFreq  bool
	version  bool
	perftest bool // --perftest-exchange: only perftest's own exchange, even with goverbs
	rdmaCM   bool // -R: the QPs are connected by the connection manager (cm.go)
}

// register adds the flags of test t (lat: a latency test) with perftest's defaults.
func (o *options) register(fs *tool.FlagSet, t operation, lat bool) {
	o.dev.Register(fs, "x", "gid-index")
	defSize, defIters, defTx, defInline := 65536, 1000, 128, 0
	if lat {
		defSize, defTx, defInline = 2, 1, 236
	}
	if t == opAtomic {
		defSize = 8
	}
	if t == opWrite && !lat {
		defIters = 5000
	}
	if t == opRead || t == opAtomic {
		defInline = 0
	}
	fs.IntOpt(&o.port, "p", "port", exchange.DefaultPort, "listen on/connect to TCP `PORT`")
	fs.IntOpt(&o.size, "s", "size", defSize, "`SIZE` of message to exchange")
	fs.IntOpt(&o.iters, "n", "iters", defIters, "`NUMBER` of exchanges")
	if t != opAtomic {
		fs.BoolOpt(&o.all, "a", "all", "run sizes from 2 till 2^23")
	} else {
		fs.StringOpt(&o.atomic, "A", "atomic_type", "FETCH_AND_ADD", "`TYPE` of atomic operation: FETCH_AND_ADD or CMP_AND_SWAP")
	}
	fs.IntOpt(&o.duration, "D", "duration", 0, "run the test for `SECONDS` (instead of -n)")
	fs.StringOpt(&o.conn, "c", "connection", "RC", "connection `TYPE` RC, UC or UD")
	fs.IntOpt(&o.mtu, "m", "mtu", 0, "path `MTU` in bytes (default: the port's active MTU)")
	if !lat {
		fs.IntOpt(&o.numQP, "q", "qp", 1, "`NUMBER` of QPs")
		fs.IntOpt(&o.txDepth, "t", "tx-depth", defTx, "`SIZE` of the send queue")
		fs.IntOpt(&o.cqMod, "Q", "cq-mod", 100, "generate a completion every `NUMBER` work requests")
		fs.IntOpt(&o.postList, "l", "post_list", 1, "post lists of `SIZE` send work requests (instead of single posts)")
		fs.BoolOpt(&o.bidir, "b", "bidirectional", "measure bidirectional bandwidth (both sides send)")
		fs.BoolOpt(&o.noPeak, "N", "noPeak", "do not compute the peak bandwidth")
		fs.BoolOpt(&o.infinite, "", "run_infinitely", "run until Ctrl-C, printing a row every -D seconds (default 5)")
		fs.Float64VarP(&o.limitBW, "limit_bw", "w", 0, "fail unless the average bandwidth reaches `VALUE` (in the report's unit)")
		fs.Float64VarP(&o.limitMR, "limit_msgrate", "y", 0, "fail unless the message rate reaches `VALUE` Mpps")
		fs.Float64Var(&o.rate, "rate_limit", 0, "send at most `RATE` (in --rate_units), paced in software")
		fs.StringOpt(&o.rateUnit, "", "rate_units", "g", "`UNIT` of --rate_limit: M (MB/s), g (Gb/s) or p (packets/s)")
		fs.StringOpt(&o.rateType, "", "rate_limit_type", "SW", "`TYPE` of rate limit: SW only (a software device has no HW pacing)")
		fs.BoolOpt(&o.gbits, "", "report_gbits", "report bandwidth in Gb/sec")
		fs.BoolOpt(&o.cpuUtil, "", "cpu_util", "report this process's CPU utilization (duration runs)")
	} else {
		o.numQP, o.txDepth, o.cqMod, o.postList = 1, defTx, 1, 1
		fs.BoolOpt(&o.cycles, "C", "report-cycles", "report times in cpu cycle units (not supported: see the README)")
		fs.BoolOpt(&o.hist, "H", "report-histogram", "print every sample, sorted (after the summary)")
		fs.BoolOpt(&o.unsorted, "U", "report-unsorted", "print every sample in the order measured (implies -H)")
		fs.BoolOpt(&o.waitSend, "", "wait-send", "wait for each send's completion (the peer's ACK) before looking for the reply, as perftest's latency tools do")
	}
	fs.IntOpt(&o.rxDepth, "r", "rx-depth", 512, "`SIZE` of the receive queue (send tests)")
	fs.IntOpt(&o.inline, "I", "inline_size", defInline, "max `SIZE` of a message sent inline")
	fs.IntOpt(&o.outs, "o", "outs", 16, "`NUMBER` of outstanding reads/atomics")
	fs.IntOpt(&o.timeout, "u", "qp-timeout", 14, "QP `TIMEOUT`: 4.096 usec * 2^TIMEOUT")
	fs.BoolOpt(&o.events, "e", "events", "sleep on CQ events (default: poll)")
	if t == opSend {
		fs.BoolOpt(&o.srq, "", "use-srq", "receive through a shared receive queue (--rx-depth is its size)")
	}
	fs.BoolOpt(&o.cpuFreq, "F", "CPU-freq", "do not fail on CPU frequency warnings (ignored)")
	fs.BoolOpt(&o.outJSON, "", "out_json", "write the report to a JSON file, with perftest's keys")
	fs.StringOpt(&o.jsonFile, "", "out_json_file", "perftest_out.json", "`FILE` of --out_json")
	fs.BoolOpt(&o.json, "", "json", "print one JSON object per result row instead of the table")
	fs.BoolOpt(&o.loopback, "", "loopback", "run server and client in this process over two software devices")
	fs.BoolOpt(&o.rdmaCM, "R", "rdma_cm", "connect the QPs with rdma_cm (the connection manager on QP1) instead of the exchanged QP numbers")
	fs.BoolOpt(&o.perftest, "", "perftest-exchange", "speak only perftest's exchange, as a real perftest does, even to a goverbs peer (both sides then need the same flags)")
	fs.BoolOpt(&o.version, "V", "version", "print the version and exit")
}

// cqModSizeLimit is the message size above which perftest completes every work request
// by default (MSG_SIZE_CQ_MOD_LIMIT).
const cqModSizeLimit = 8192

func (o *options) check(t operation, lat bool, fs *tool.FlagSet) error {
	o.sizeSet = fs.Changed("size")
	o.conn = strings.ToUpper(o.conn)
	switch o.conn {
	case "RC":
	case "UC":
		if t == opRead || t == opAtomic {
			return fmt.Errorf("connection type UC does not support %s: use RC", strings.ToUpper(t.verb()))
		}
	case "UD":
		if t != opSend {
			return fmt.Errorf("connection type UD supports only send tests: use RC")
		}
	default:
		return fmt.Errorf("invalid connection type %q: must be RC, UC or UD", o.conn)
	}
	if o.size < 1 || o.size > 1<<23 {
		return fmt.Errorf("invalid size %d: must be 1..8388608 bytes", o.size)
	}
	if t == opAtomic && o.size != 8 {
		return fmt.Errorf("invalid size %d: atomic operations are 8 bytes", o.size)
	}
	if t == opAtomic {
		o.atomic = strings.ToUpper(o.atomic)
		if o.atomic != "FETCH_AND_ADD" && o.atomic != "CMP_AND_SWAP" {
			return fmt.Errorf("invalid atomic type %q: must be FETCH_AND_ADD or CMP_AND_SWAP", o.atomic)
		}
	}
	if o.iters < 1 {
		return fmt.Errorf("invalid iteration count %d", o.iters)
	}
	if o.duration < 0 {
		return fmt.Errorf("invalid duration %d", o.duration)
	}
	if o.infinite {
		if o.all {
			return fmt.Errorf("--run_infinitely runs one size: not with -a")
		}
		if o.duration == 0 {
			o.duration = 5 // perftest's period for --run_infinitely
		}
	}
	if o.duration > 0 && (o.all || lat) {
		return fmt.Errorf("-D works with bandwidth tests of one size only (not with -a or latency tests)")
	}
	if o.numQP < 1 || o.numQP > 256 {
		return fmt.Errorf("invalid number of QPs %d: must be 1..256", o.numQP)
	}
	if o.mtu != 0 {
		if _, err := tool.ParseMTU(o.mtu); err != nil {
			return err
		}
	}
	if o.txDepth < 1 || o.txDepth > 16384 {
		return fmt.Errorf("invalid tx depth %d: must be 1..16384", o.txDepth)
	}
	if o.rxDepth < 1 || o.rxDepth > 16384 {
		return fmt.Errorf("invalid rx depth %d: must be 1..16384", o.rxDepth)
	}
	if o.inline < 0 || o.inline > 512 {
		return fmt.Errorf("invalid inline size %d: the device supports up to 512 bytes", o.inline)
	}
	if o.outs < 1 || o.outs > 128 {
		return fmt.Errorf("invalid number of outstanding reads %d: must be 1..128", o.outs)
	}
	if o.cqMod < 1 || o.cqMod > 1024 {
		return fmt.Errorf("invalid CQ moderation %d: must be 1..1024", o.cqMod)
	}
	if !lat && o.size > cqModSizeLimit && o.conn != "UD" && !o.all && !o.events {
		// As perftest: above 8 KiB every work request completes unless -Q asks
		// otherwise (moderation buys nothing at that size, and skews the bandwidth the
		// completions time), and one that asks is warned. Not for UD, -a or -e.
		if !fs.Changed("cq-mod") {
			o.cqMod = 1
		} else if o.cqMod > 1 {
			fmt.Fprintln(os.Stderr, "Warning: Large message requested and CQ moderation enabled")
			fmt.Fprintln(os.Stderr, "Warning: It can lead to inaccurate results")
		}
	}
	if o.postList < 1 || o.postList > o.txDepth {
		return fmt.Errorf("invalid post list %d: must be 1..tx depth (%d)", o.postList, o.txDepth)
	}
	if o.postList > 1 {
		// As perftest: a list is signaled as a whole, so the moderation is the list
		// (unless -Q set it), and a run is whole lists.
		if !fs.Changed("cq-mod") {
			o.cqMod = o.postList
		} else if o.postList%o.cqMod != 0 {
			return fmt.Errorf("post list size %d must be a multiple of CQ moderation %d", o.postList, o.cqMod)
		}
		o.iters = (o.iters + o.postList - 1) / o.postList * o.postList
	}
	if o.timeout < 0 || o.timeout > 31 {
		return fmt.Errorf("invalid QP timeout %d: must be 0..31", o.timeout)
	}
	if o.cycles {
		return fmt.Errorf("-C (report cycles) is not supported: Go has no portable cycle counter; times are reported in usec")
	}
	if o.unsorted {
		o.hist = true
	}
	if o.limitBW < 0 || o.limitMR < 0 || o.rate < 0 {
		return fmt.Errorf("invalid limit: must not be negative")
	}
	if o.rate > 0 {
		if strings.ToUpper(o.rateType) != "SW" {
			return fmt.Errorf("--rate_limit_type %s is not supported: a software device paces in software (SW)", o.rateType)
		}
		switch o.rateUnit {
		case "M", "g", "p":
		default:
			return fmt.Errorf("invalid --rate_units %q: must be M (MB/s), g (Gb/s) or p (packets/s)", o.rateUnit)
		}
	}
	if o.rdmaCM && o.conn == "UC" {
		return fmt.Errorf("-R: UC is not supported in librdmacm (perftest refuses it too): use RC")
	}
	if o.rdmaCM && o.conn == "UD" {
		return fmt.Errorf("-R with UD (SIDR) is not supported by the perf tools yet: use RC, or UD without -R")
	}
	if o.srq && o.conn == "UD" {
		return fmt.Errorf("--use-srq works with RC and UC here")
	}
	return nil
}

// rateBytes is --rate_limit as a pacing rate: bytes per second, or with unit p messages
// per second (then msgs is true).
func (o *options) rateBytes() (rate float64, msgs bool) {
	switch o.rateUnit {
	case "M":
		return o.rate * 1e6, false
	case "p":
		return o.rate, true
	}
	return o.rate * 1e9 / 8, false
}

// dataExMethod is the banner's "Data ex. method": perftest's -R exchanges over rdma_cm.
func (o *options) dataExMethod() string {
	if o.rdmaCM {
		return "rdma_cm"
	}
	return "Ethernet"
}
