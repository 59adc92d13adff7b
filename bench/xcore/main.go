// Command xcore measures how fast this machine moves data from one core to another
// now: a producer thread on one CPU copies 128 KiB chunks into a ring of four, a
// consumer thread on another copies each out, and xcore prints the consumer's rate in
// GB/s. It is the benchmarks' witness of the machine's phase.
//
// On a VM the rate is not a constant of the machine: on the 2-core AMD EPYC VMs this
// project runs on, it holds at 18-25 GB/s for seconds, then at 3-5 GB/s for seconds
// (the host moving a virtual CPU away from the other's cache, or another guest's
// load), while a copy within one core holds at 38-41 GB/s throughout. Every stream
// between two processes pays it: iperf3 over the kernel's TCP and over rsockets alike
// ran 12-16 Gb/s in slow seconds and 30-41 in fast ones, their copies taking 3.7-4.5×
// the CPU per byte (perf, 2026-11-28). bench/rspreload.sh runs xcore around each
// timed run, so that a round whose two runs met different phases can be told apart
// from a round that compares like with like (docs/DESIGN.md, "What made the figure
// depend on the machine").
//
//	go run ./bench/xcore              # one figure over 300 ms
//	go run ./bench/xcore -watch 20    # one figure a second for 20 s
//
// Linux only (sched_setaffinity).

//go:build linux

package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	chunk = 128 << 10 // iperf3's write size
	slots = 4
)

func main() {
	window := flag.Duration("t", 300*time.Millisecond, "measure over this long")
	watch := flag.Int("watch", 0, "print a figure each second for this many seconds instead")
	flag.Parse()
	cpus, err := twoCPUs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "xcore:", err)
		os.Exit(1)
	}
	if *watch > 0 {
		for range *watch {
			fmt.Printf("%.1f\n", rate(cpus, time.Second))
		}
		return
	}
	fmt.Printf("%.1f\n", rate(cpus, *window))
}

// twoCPUs returns the first two CPUs this process may run on.
func twoCPUs() ([2]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return [2]int{}, err
	}
	var got []int
	for c := 0; c < 1024 && len(got) < 2; c++ {
		if set.IsSet(c) {
			got = append(got, c)
		}
	}
	if len(got) < 2 {
		return [2]int{}, fmt.Errorf("needs two CPUs, has %d", len(got))
	}
	return [2]int{got[0], got[1]}, nil
}

// pin locks the calling goroutine to its thread and the thread to cpu.
func pin(cpu int) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	unix.SchedSetaffinity(0, &set) // unpinned, the figure is still a cross-thread one
}

// rate runs the pipeline for d and returns the bytes the consumer copied out per
// second, in GB/s.
func rate(cpus [2]int, d time.Duration) float64 {
	ring := make([][]byte, slots)
	for i := range ring {
		ring[i] = make([]byte, chunk)
	}
	src, dst := make([]byte, chunk), make([]byte, chunk)
	for i := range src {
		src[i] = byte(i)
	}
	var head, tail atomic.Uint64
	var stop atomic.Bool
	left := make(chan struct{})
	go func() {
		defer close(left)
		pin(cpus[0])
		for !stop.Load() {
			h := head.Load()
			if h-tail.Load() < slots {
				copy(ring[h%slots], src)
				head.Store(h + 1)
			}
		}
	}()
	pin(cpus[1])
	defer runtime.UnlockOSThread()
	take := func() {
		t := tail.Load()
		for head.Load() == t {
		}
		copy(dst, ring[t%slots])
		tail.Store(t + 1)
	}
	// The first chunks fault the ring in and start the producer: not the machine's rate.
	for range 2 * slots {
		take()
	}
	n := 0
	t0 := time.Now()
	for time.Since(t0) < d {
		for range 16 {
			take()
			n += chunk
		}
	}
	el := time.Since(t0)
	stop.Store(true)
	<-left
	return float64(n) / el.Seconds() / 1e9
}
