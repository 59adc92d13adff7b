// Command ringcost measures what moving a 64 KiB payload from one core to another costs
// each side, the question behind the same-host shortcut's bandwidth (issue 28,
// docs/guide/same-host.md): through a ring in shared memory, as the shortcut does (the
// producer copies its buffer into the ring; the consumer computes each 4 KiB's CRC,
// the ICRC's work, and copies it out), or by cross-memory attach (the consumer pulls
// the producer's buffer into its own with process_vm_readv and then computes the CRC;
// or the producer pushes it with process_vm_writev and the consumer computes the CRC).
//
// The two sides are two threads of this process on CPUs 0 and 1 (sched_setaffinity);
// the ring is shared anonymous memory and process_vm_readv/writev name this process,
// so the caches and the kernel's copy behave as between two processes. Each side's
// time per 64 KiB is timed item by item and reported as the median (and tenth
// percentile): a thread preempted by other load lengthens a few items, not the median.
//
//	go run ./bench/ringcost -mode ring
//	go run ./bench/ringcost -mode pull -dirty -srcbufs 8
//
// -dirty has the producer write its source buffer before each item, as a program that
// produces its data does; without it the source stays in both cores' caches, as
// perftest's never-written buffer does. Linux only.

//go:build linux

package main

import (
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"sort"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const chunk = 64 << 10

func main() {
	mode := flag.String("mode", "ring", "ring, pull (process_vm_readv by the consumer) or push (process_vm_writev by the producer)")
	n := flag.Int("n", 30000, "items of 64 KiB")
	slots := flag.Int("slots", 64, "the ring's slots of 64 KiB (ring mode)")
	dirty := flag.Bool("dirty", false, "the producer writes its source buffer before each item")
	srcbufs := flag.Int("srcbufs", 1, "source buffers, used in turn (pull mode: as many items in flight)")
	crc := flag.Bool("crc", true, "the consumer computes each 4 KiB's CRC (the ICRC's work)")
	pf := flag.Int("prefetch", 0, "ring mode: the consumer prefetches this many bytes ahead (0: none; amd64)")
	demote := flag.Bool("demote", false, "ring mode: the producer CLDEMOTEs each slot after writing it (amd64)")
	nt := flag.Bool("nt", false, "ring mode: the producer copies with non-temporal stores (amd64, AVX-512)")
	flag.Parse()
	if *mode != "ring" && *mode != "pull" && *mode != "push" || *n < 1 || *slots < 1 || *srcbufs < 1 {
		fmt.Fprintln(os.Stderr, "ringcost: bad flags")
		os.Exit(2)
	}
	if err := run(*mode, *n, *slots, *srcbufs, *dirty, *crc, *pf, *demote, *nt); err != nil {
		fmt.Fprintln(os.Stderr, "ringcost:", err)
		os.Exit(1)
	}
}

func run(mode string, n, slots, srcbufs int, dirty, crc bool, pf int, demote, nt bool) error {
	pid := os.Getpid()
	ring, err := mapShared(slots * chunk)
	if err != nil {
		return err
	}
	srcs := make([][]byte, srcbufs)
	for i := range srcs {
		if srcs[i], err = mapShared(chunk); err != nil {
			return err
		}
	}
	dst, err := mapShared(chunk)
	if err != nil {
		return err
	}
	var head, tail atomic.Uint64
	prodT, consT := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	errs := make(chan error, 2)
	var sink uint32
	sum := func(b []byte) {
		if crc {
			sink += crc32.ChecksumIEEE(b)
		}
	}
	go func() { // the consumer, on CPU 0
		errs <- onCPU(0, func() error {
			for i := uint64(0); i < uint64(n); i++ {
				for head.Load() <= i {
				}
				t0 := time.Now()
				switch mode {
				case "ring":
					s := ring[int(i%uint64(slots))*chunk:][:chunk]
					if pf > 0 {
						prefetch(s[:min(pf, chunk)])
					}
					for off := 0; off < chunk; off += 4096 {
						if pf > 0 && off+4096 < chunk {
							prefetch(s[min(off+pf, chunk):min(off+4096+pf, chunk)])
						}
						sum(s[off : off+4096])
						copy(dst[off:off+4096], s[off:off+4096])
					}
				case "pull":
					if err := vm(false, pid, dst, srcs[int(i)%len(srcs)]); err != nil {
						return err
					}
					for off := 0; off < chunk; off += 4096 {
						sum(dst[off : off+4096])
					}
				case "push":
					for off := 0; off < chunk; off += 4096 {
						sum(dst[off : off+4096])
					}
				}
				consT = append(consT, time.Since(t0))
				tail.Store(i + 1)
			}
			return nil
		})
	}()
	go func() { // the producer, on CPU 1
		errs <- onCPU(1, func() error {
			room := uint64(slots)
			switch mode {
			case "pull":
				room = uint64(len(srcs))
			case "push":
				room = 1 // one destination
			}
			for i := uint64(0); i < uint64(n); i++ {
				for i-tail.Load() >= room {
				}
				src := srcs[int(i)%len(srcs)]
				t0 := time.Now()
				if dirty {
					for off := 0; off < chunk; off += 64 {
						src[off] = byte(i)
					}
				}
				switch mode {
				case "ring":
					d := ring[int(i%uint64(slots))*chunk:][:chunk]
					if nt {
						ntcopy(d, src)
					} else {
						copy(d, src)
					}
					if demote {
						cldemote(d)
					}
				case "push":
					if err := vm(true, pid, src, dst); err != nil {
						return err
					}
				}
				prodT = append(prodT, time.Since(t0))
				head.Store(i + 1)
			}
			return nil
		})
	}()
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	cm, c10 := median(consT)
	pm, p10 := median(prodT)
	fmt.Printf("%s dirty=%v srcbufs=%d crc=%v prefetch=%d demote=%v nt=%v: per 64 KiB, consumer %v (p10 %v, %.1f GB/s), producer %v (p10 %v, %.1f GB/s)%s\n",
		mode, dirty, srcbufs, crc, pf, demote, nt, cm, c10, chunk/float64(cm.Nanoseconds()), pm, p10, chunk/float64(pm.Nanoseconds()), [2]string{"", " "}[sink&1])
	return nil
}

// onCPU runs f on a thread of its own bound to CPU cpu.
func onCPU(cpu int, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity to CPU %d: %v", cpu, err)
	}
	return f()
}

// mapShared maps n bytes of shared anonymous memory, written once so that no item
// pays a page fault.
func mapShared(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap: %v", err)
	}
	for i := range b {
		b[i] = byte(i)
	}
	return b, nil
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func median(d []time.Duration) (med, p10 time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[len(d)/10]
}
