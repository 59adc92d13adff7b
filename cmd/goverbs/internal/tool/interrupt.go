package tool

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"
)

// Interrupter turns Ctrl-C into the end of a perf run. While a side is measuring
// bandwidth (graceful), Ctrl-C only cancels ctx: the side stops posting, finishes the
// round with its peer and prints the results so far, as perftest does at the end of a
// duration run. Anywhere else (waiting for a client, exchanging, a latency loop) it
// closes what the side is blocked on, so that the tool exits at once with status 130.
// After the first Ctrl-C the default handling is back: a second one kills the process.
type Interrupter struct {
	name     string
	ctx      context.Context
	cancel   context.CancelFunc
	sig      chan os.Signal
	graceful atomic.Bool
	hit      atomic.Bool
	mu       sync.Mutex
	closers  []func()
	done     chan struct{}
}

// NewInterrupter starts watching for Ctrl-C on behalf of the tool name.
func NewInterrupter(name string) *Interrupter {
	ctx, cancel := context.WithCancel(context.Background())
	in := &Interrupter{name: name, ctx: ctx, cancel: cancel, sig: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(in.sig, os.Interrupt)
	go in.watch()
	return in
}

func (in *Interrupter) watch() {
	select {
	case <-in.sig:
	case <-in.done:
		return
	}
	signal.Stop(in.sig)
	in.hit.Store(true)
	in.cancel()
	if in.graceful.Load() {
		return
	}
	in.mu.Lock()
	closers := in.closers
	in.mu.Unlock()
	for _, f := range closers {
		f()
	}
	// A side blocked on a CQ sees its peer vanish only after a timeout: do not wait
	// for that.
	select {
	case <-in.done:
	case <-time.After(2 * time.Second):
		fmt.Fprintf(os.Stderr, "goverbs %s: interrupted\n", in.name)
		os.Exit(130)
	}
}

// OnStop registers f to unblock the side when Ctrl-C comes outside a measurement.
func (in *Interrupter) OnStop(f func()) {
	in.mu.Lock()
	in.closers = append(in.closers, f)
	in.mu.Unlock()
}

// Stop ends the watch; the tool is returning.
func (in *Interrupter) Stop() {
	signal.Stop(in.sig)
	select {
	case <-in.done:
	default:
		close(in.done)
	}
}

// Result maps the error of a run that Ctrl-C cut short to ErrInterrupted.
func (in *Interrupter) Result(err error) error {
	if err != nil && in.hit.Load() && !in.graceful.Load() {
		return ErrInterrupted
	}
	return err
}

// Context is done once Ctrl-C has come.
func (in *Interrupter) Context() context.Context { return in.ctx }

// SetGraceful says whether the side is measuring bandwidth now: Ctrl-C then only
// cancels Context, and the side ends its round and reports.
func (in *Interrupter) SetGraceful(on bool) { in.graceful.Store(on) }
