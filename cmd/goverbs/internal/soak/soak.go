// Package soak drives a long mixed RC stream between two software devices over the
// simulated network (netio/simnet) with faults, and verifies every byte: every SEND and
// WRITE with immediate arrives exactly once, in order, with its bytes and immediate; every
// plain WRITE has landed when it completes; every READ brings back exactly the remote
// bytes; FETCH_AND_ADD and CMP_AND_SWP return exactly the value a single, in-order
// execution gives; nothing outside the target buffers changes (guard zones around every
// remote buffer); and no completion is missing, extra or out of order.
//
// It sits above package verbs, beside the command that runs it (command.go): its test
// (presets_test.go) runs it under testing/synctest, in fake time; `goverbs soak` runs it
// in real time for long runs. stream.go sets the stream up and posts it, verify.go
// checks it, presets.go names the fault settings.
package soak

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
)

// Config is one soak run.
type Config struct {
	Messages int            // work requests to complete (default 10000)
	MaxSize  int            // largest message in bytes (default 4 path MTUs + 7)
	MTU      verbs.MTU      // path MTU (default 1024)
	Depth    int            // work requests in flight (default 16)
	Seed     uint64         // the stream's and the network's randomness
	Faults   simnet.Faults  // what the network does to datagrams
	Timeout  uint8          // QP local ACK timeout exponent (default 12: 16.8 ms)
	Stall    time.Duration  // fail when nothing completes for this long (default 60 s)
	Progress func(done int) // called every ProgressEvery completions, if set
	// ProgressEvery defaults to Messages/10.
	ProgressEvery int
	Logger        *slog.Logger // the devices' debug log (nil: none)
	// Addresses of the two simulated devices (default 127.0.200.1 and .2).
	AddrA, AddrB netip.Addr
}

// Kind is a kind of work request in the stream.
type Kind int

const (
	Send Kind = iota
	SendImm
	Write
	WriteImm
	Read
	FetchAdd
	CmpSwap
	numKinds
)

var kindNames = [...]string{"SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ", "FETCH_AND_ADD", "CMP_AND_SWP"}

func (k Kind) String() string { return kindNames[k] }

// consumesRecv says whether the kind completes at the receiver.
func (k Kind) consumesRecv() bool { return k == Send || k == SendImm || k == WriteImm }

// Result is what a run did.
type Result struct {
	Messages int
	ByKind   [numKinds]int
	Bytes    uint64        // payload bytes moved (SEND, WRITE, READ)
	Elapsed  time.Duration // by the clock the run used (fake under synctest)
	Net      simnet.Stats
	// Device counters of the requester (A) and responder (B), and the QPs' own.
	A, B     verbs.Counters
	QPA, QPB verbs.QPCounters
}

// Format writes the result as a small report.
func (r *Result) Format() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "messages      %d in %v (%.0f/s)\n", r.Messages, r.Elapsed.Round(time.Millisecond), float64(r.Messages)/r.Elapsed.Seconds())
	fmt.Fprintf(&b, "kinds        ")
	for k := Kind(0); k < numKinds; k++ {
		fmt.Fprintf(&b, " %s %d", k, r.ByKind[k])
	}
	fmt.Fprintf(&b, "\npayload       %d bytes\n", r.Bytes)
	n := r.Net
	fmt.Fprintf(&b, "network       sent %d delivered %d lost %d duplicated %d reordered %d corrupted %d queue-full %d\n",
		n.Sent, n.Delivered, n.Dropped, n.Duplicated, n.Reordered, n.Corrupted, n.QueueFull)
	fmt.Fprintf(&b, "QP requester  tx %d rx %d retransmits %d timeouts %d seq-NAK rcvd %d RNR-NAK rcvd %d\n",
		r.QPA.TxPackets, r.QPA.RxPackets, r.QPA.Retransmits, r.QPA.RetryTimeouts, r.QPA.SeqNakReceived, r.QPA.RNRNakReceived)
	fmt.Fprintf(&b, "QP responder  tx %d rx %d seq-NAK sent %d RNR-NAK sent %d duplicates %d\n",
		r.QPB.TxPackets, r.QPB.RxPackets, r.QPB.SeqNakSent, r.QPB.RNRNakSent, r.QPB.DuplicateRequests)
	// Device counters in the layout of `rdma statistic show` (zeros left out).
	for _, side := range []struct {
		name string
		c    verbs.Counters
	}{{"soakA", r.A}, {"soakB", r.B}} {
		fmt.Fprintf(&b, "link %s/1", side.name)
		for _, c := range side.c {
			if c.Value != 0 {
				fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
			}
		}
		fmt.Fprintln(&b)
	}
	return b.String()
}

// Counter returns a device counter summed over both devices.
func (r *Result) Counter(name string) uint64 { return r.A.Get(name) + r.B.Get(name) }

const (
	slots     = 256
	recvAhead = 64
	guard     = 64
)

// guarded is a buffer registered between two guard zones.
type guarded struct {
	all []byte
	mr  *verbs.MR
	pat []byte // the guards' contents
}

func register(pd *verbs.PD, n int, acc verbs.Access, seed byte) (*guarded, error) {
	all := make([]byte, guard+n+guard)
	for i := range all {
		all[i] = seed + byte(i*5)
	}
	mr, err := pd.RegMR(all[guard:guard+n], acc)
	if err != nil {
		return nil, err
	}
	return &guarded{all: all, mr: mr, pat: bytes.Clone(all)}, nil
}

func (g *guarded) guardsIntact() bool {
	n := len(g.all)
	return bytes.Equal(g.all[:guard], g.pat[:guard]) && bytes.Equal(g.all[n-guard:], g.pat[n-guard:])
}

func (g *guarded) buf() []byte { return g.mr.Buf() }

// Run performs one soak run. It returns an error describing the first thing that went
// wrong (a wrong byte, a missing or extra completion, an error status, a stall).
func Run(ctx context.Context, cfg Config) (*Result, error) { return run(ctx, cfg, nil) }

func run(ctx context.Context, cfg Config, tamper func(*stream)) (*Result, error) {
	if cfg.Messages <= 0 {
		cfg.Messages = 10000
	}
	if cfg.MTU == 0 {
		cfg.MTU = verbs.MTU1024
	}
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 4*cfg.MTU.Bytes() + 7
	}
	if cfg.Depth <= 0 {
		cfg.Depth = 16
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 12
	}
	if cfg.Stall <= 0 {
		cfg.Stall = time.Minute
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = max(1, cfg.Messages/10)
	}
	if !cfg.AddrA.IsValid() {
		cfg.AddrA = netip.MustParseAddr("127.0.200.1")
	}
	if !cfg.AddrB.IsValid() {
		cfg.AddrB = netip.MustParseAddr("127.0.200.2")
	}
	s := &stream{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x50a4)), tamper: tamper}
	s.net = simnet.New(cfg.Seed, cfg.Faults)
	defer s.net.Close()
	if err := s.setup(); err != nil {
		s.close()
		return nil, err
	}
	start := time.Now()
	err := s.run(ctx)
	res := &Result{Messages: s.done, ByKind: s.byKind, Bytes: s.bytes, Elapsed: time.Since(start), Net: s.net.Stats(),
		A: s.devA.Counters(), B: s.devB.Counters(), QPA: s.qa.Counters(), QPB: s.qb.Counters()}
	if err == nil {
		err = s.finalChecks()
	}
	if err != nil {
		err = fmt.Errorf("%w\nrequester: %s\nresponder: %s", err, s.debug(s.qa), s.debug(s.qb))
	}
	s.close()
	return res, err
}
