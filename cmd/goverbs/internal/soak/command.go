package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/netio/simnet"
)

// RunCommand is goverbs soak: the issue-6 soak as a command, for long runs. Two
// software devices in this process exchange a mixed RC stream (SEND, WRITE, READ,
// atomics; 0 to several MTUs) over the simulated network with the chosen faults, in
// real time, and every byte and completion is verified. It prints progress, then the
// run's figures and both devices' counters; the exit status is 1 if anything was wrong.
//
//	goverbs soak -n 1000000                 # all faults together
//	goverbs soak -n 100000 --faults each    # every preset in turn
//	goverbs soak --loss 0.05 --delay 1ms    # a custom mix
func RunCommand(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	var (
		n, maxSize, mtu, depth, timeout int
		preset                          string
		seed                            int
		quiet                           bool
		f                               simnet.Faults
		custom                          bool
	)
	fs.ArgsUsage = ""
	fs.IntOpt(&n, "n", "iters", 100000, "number of work requests to complete per run")
	fs.StringOpt(&preset, "", "faults", "all", "fault preset: "+presetNames()+", or each (every preset in turn)")
	fs.IntOpt(&maxSize, "s", "size", 0, "largest message in `BYTES` (default 4 MTUs + 7)")
	fs.IntOpt(&mtu, "m", "mtu", 1024, "path MTU `BYTES`")
	fs.IntOpt(&depth, "t", "tx-depth", 16, "work requests in flight")
	// 10, not 8 (1 ms): the simulated network delivers on Go timers, and the runtime
	// sleeps in whole milliseconds once its threads block (a 50 µs time.Sleep takes
	// 1.1 ms on the 2-core VMs), so a 1 ms timeout fired for the harness's pauses as
	// well as for lost packets, and under load chained enough of them to run a READ out
	// of retries (RETRY_EXC_ERR in CI, once in some 70 runs of the jitter preset).
	fs.IntOpt(&timeout, "", "timeout", 10, "local ACK timeout exponent: 4.096 us × 2^N (10: 4.2 ms, above the Go runtime's millisecond sleeps)")
	fs.IntOpt(&seed, "", "seed", 1, "random `SEED` of the stream and the network")
	fs.BoolOpt(&quiet, "q", "quiet", "no progress lines")
	fs.Float64Var(&f.Loss, "loss", 0, "custom faults: loss probability per datagram")
	fs.Float64Var(&f.Reorder, "reorder", 0, "custom faults: probability a datagram is held back")
	fs.Float64Var(&f.Duplicate, "dup", 0, "custom faults: duplication probability")
	fs.Float64Var(&f.Corrupt, "corrupt", 0, "custom faults: probability of one flipped bit")
	fs.DurationVar(&f.Delay, "delay", 0, "custom faults: one-way delay")
	fs.DurationVar(&f.Jitter, "jitter", 0, "custom faults: extra uniform delay [0, D)")
	fs.DurationVar(&f.ReorderDelay, "reorder-delay", 0, "custom faults: how long a held-back datagram waits at most")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("soak takes no server address (both devices run in this process)")
	}
	for _, name := range []string{"loss", "reorder", "dup", "corrupt", "delay", "jitter", "reorder-delay"} {
		custom = custom || fs.Changed(name)
	}
	mtuE, err := tool.ParseMTU(mtu)
	if err != nil {
		return err
	}
	if n < 1 || depth < 1 || depth > 128 || timeout < 1 || timeout > 31 {
		return fmt.Errorf("invalid -n, --tx-depth (1..128) or --timeout (1..31)")
	}
	var runs []Preset
	switch {
	case custom:
		runs = []Preset{{Name: "custom", Faults: f}}
	case preset == "each":
		runs = Presets
	default:
		p, ok := PresetNamed(preset)
		if !ok {
			return fmt.Errorf("unknown fault preset %q (%s, each)", preset, presetNames())
		}
		runs = []Preset{p}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	failed := 0
	for i, p := range runs {
		start := time.Now()
		cfg := Config{Messages: n, MaxSize: maxSize, MTU: mtuE, Depth: depth, Seed: uint64(seed + i),
			Faults: p.Faults, Timeout: uint8(timeout)}
		if !quiet {
			cfg.Progress = func(done int) {
				el := time.Since(start)
				fmt.Fprintf(os.Stderr, "soak %s: %d/%d (%.0f/s)\n", p.Name, done, n, float64(done)/el.Seconds())
			}
		}
		fmt.Printf("== soak %s: %s\n", p.Name, describeFaults(p.Faults))
		res, err := Run(ctx, cfg)
		if res != nil {
			fmt.Print(res.Format())
		}
		if errors.Is(err, context.Canceled) {
			// Ctrl-C is the user's way to end a long run, not a failure: what
			// completed until then was verified as it completed.
			fmt.Printf("interrupted: %d of %d work requests completed, each verified\n", res.Messages, n)
			return tool.ErrInterrupted
		}
		if err != nil {
			failed++
			fmt.Printf("FAILED: %v\n", err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		fmt.Println("verified: every byte, completion and atomic result as expected")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d runs failed", failed, len(runs))
	}
	return nil
}

func presetNames() string {
	var names []string
	for _, p := range Presets {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

func describeFaults(f simnet.Faults) string {
	var parts []string
	add := func(name string, p float64) {
		if p > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", name, 100*p))
		}
	}
	add("loss", f.Loss)
	add("reorder", f.Reorder)
	add("duplicate", f.Duplicate)
	add("corrupt", f.Corrupt)
	if f.Delay > 0 {
		parts = append(parts, fmt.Sprintf("delay %v", f.Delay))
	}
	if f.Jitter > 0 {
		parts = append(parts, fmt.Sprintf("jitter %v", f.Jitter))
	}
	if len(parts) == 0 {
		return "no faults"
	}
	return strings.Join(parts, ", ")
}
