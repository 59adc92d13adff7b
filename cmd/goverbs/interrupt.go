package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"
)

// errInterrupted ends a run that Ctrl-C stopped where it had nothing to report.
var errInterrupted = errors.New("interrupted")

// interrupter turns Ctrl-C into the end of a perf run. While a side is measuring
// bandwidth (graceful), Ctrl-C only cancels ctx: the side stops posting, finishes the
// round with its peer and prints the results so far, as perftest does at the end of a
// duration run. Anywhere else (waiting for a client, exchanging, a latency loop) it
// closes what the side is blocked on, so that the tool exits at once with status 130.
// After the first Ctrl-C the default handling is back: a second one kills the process.
type interrupter struct {
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

func newInterrupter(name string) *interrupter {
	ctx, cancel := context.WithCancel(context.Background())
	in := &interrupter{name: name, ctx: ctx, cancel: cancel, sig: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(in.sig, os.Interrupt)
	go in.watch()
	return in
}

func (in *interrupter) watch() {
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

// onStop registers f to unblock the side when Ctrl-C comes outside a measurement.
func (in *interrupter) onStop(f func()) {
	in.mu.Lock()
	in.closers = append(in.closers, f)
	in.mu.Unlock()
}

// stop ends the watch; the tool is returning.
func (in *interrupter) stop() {
	signal.Stop(in.sig)
	select {
	case <-in.done:
	default:
		close(in.done)
	}
}

// result maps the error of a run that Ctrl-C cut short to errInterrupted.
func (in *interrupter) result(err error) error {
	if err != nil && in.hit.Load() && !in.graceful.Load() {
		return errInterrupted
	}
	return err
}
