//go:build linux

package afxdp

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The AF_XDP socket's rings (Documentation/networking/af_xdp.rst). Each is a
// single-producer single-consumer queue in memory shared with the kernel: a producer
// index, a consumer index, a flags word and the entries, at the offsets the kernel
// reports (XDP_MMAP_OFFSETS). This side is the producer of the fill and tx rings and the
// consumer of the rx and completion rings. An index is a free-running 32-bit counter;
// the entry is at index & mask. The kernel's index is read with an atomic load, which
// orders the entry reads after it, and this side's index is published with an atomic
// store after the entries were written (the release the kernel's acquire pairs with).
type ring struct {
	mem   []byte
	prod  *uint32
	cons  *uint32
	flags *uint32
	descs unsafe.Pointer
	mask  uint32
	size  uint32
	local uint32 // this side's index: prod for a producer ring, cons for a consumer ring
	pub   uint32 // for a producer ring, the index last published
}

// mapRing maps a ring of n entries of entrySize bytes at the page offset pgoff.
func mapRing(fd int, off *unix.XDPRingOffset, n uint32, entrySize uintptr, pgoff int64, producer bool) (*ring, error) {
	size := int(off.Desc) + int(n)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	r := &ring{
		mem:   mem,
		prod:  (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		cons:  (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags: (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		descs: unsafe.Pointer(&mem[off.Desc]),
		mask:  n - 1,
		size:  n,
	}
	if producer {
		r.local = atomic.LoadUint32(r.prod)
		r.pub = r.local
	} else {
		r.local = atomic.LoadUint32(r.cons)
	}
	return r, nil
}

func (r *ring) unmap() {
	if r != nil && r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

// needWakeup reports the kernel's XDP_RING_NEED_WAKEUP flag: it wants a syscall (recvfrom
// for the fill ring, sendto for tx) before it looks at the ring again.
func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// Consumer side (rx, completion).

// available is the number of entries the kernel produced and this side has not consumed.
func (r *ring) available() uint32 { return atomic.LoadUint32(r.prod) - r.local }

// release consumes n entries.
func (r *ring) release(n uint32) {
	r.local += n
	atomic.StoreUint32(r.cons, r.local)
}

// Producer side (fill, tx).

// free is the number of entries this side may still write.
func (r *ring) free() uint32 { return r.size - (r.local - atomic.LoadUint32(r.cons)) }

// pending is the number of entries written and not yet published.
func (r *ring) pending() uint32 { return r.local - r.pub }

// publish makes the entries written so far visible to the kernel.
func (r *ring) publish() {
	if r.local != r.pub {
		atomic.StoreUint32(r.prod, r.local)
		r.pub = r.local
	}
}

// desc is entry i of an rx or tx ring.
func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// addr is entry i of a fill or completion ring.
func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

// setsockopt and getsockopt for the XDP options x/sys/unix has no helper for.
func setsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// bindWait bounds how long bind waits for a queue that a closed socket still holds.
const bindWait = 2 * time.Second

// xsk is the socket, its UMEM and rings, and the sockets of further receive queues
// sharing the UMEM (XDP_SHARED_UMEM).
//
// The UMEM holds half frames per ring: frames [0, half) receive for the socket's own
// queue, [half, 2*half) send, and each further queue k (from 1) receives into
// [(k+1)*half, (k+2)*half).
type xsk struct {
	fd        int
	umem      []byte
	frameSize uint64
	half      uint64
	rxqs      []*rxq // rxqs[0] is this socket's own receive side
	tx, comp  *ring
	zeroCopy  bool
	txBudget  int // copy mode: descriptors one sendto transmits
}

// rxq is one receive queue's socket and rings. A further queue's socket has a
// completion ring of its own too (the kernel asks for one), which it never uses: all
// sending goes through the first socket.
type rxq struct {
	fd       int
	queue    int
	fill, rx *ring
	comp     *ring  // a further queue's, unused
	first    uint64 // its frames: [first, first+count)
	count    uint64
	own      bool // fd is this rxq's to close (not the first socket's)
	// noNAPI: the kernel reports no NAPI instance behind the queue's socket (veth in
	// copy mode), so a busy-poll recvfrom has nothing to drive and is not made;
	// napiAsk counts down the batches until it is asked again (napiID, kickRx).
	noNAPI  bool
	napiAsk uint32
}

// napiID is the NAPI instance the kernel busy-polls for the socket when it is read
// (SO_INCOMING_NAPI_ID): 0 while none is known. The kernel marks the socket with the
// instance of the first packet it redirects into it, if the driver's queue has one.
func napiID(fd int) int {
	id, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID)
	if err != nil {
		return 0
	}
	return id
}

// newXSK makes an AF_XDP socket with rings of frames/2 entries each way and a UMEM of
// frames/2 frames of frameSize bytes for each (and for each of extra further receive
// queues), not yet bound.
func newXSK(frames, frameSize, extra int) (*xsk, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if err == unix.EAFNOSUPPORT {
			return nil, fmt.Errorf("%w: socket(AF_XDP): %v (kernel without CONFIG_XDP_SOCKETS)", ErrNotSupported, err)
		}
		return nil, fmt.Errorf("afxdp: socket(AF_XDP): %w", err)
	}
	half := frames / 2
	x := &xsk{fd: fd, frameSize: uint64(frameSize), half: uint64(half)}
	fail := func(what string, err error) (*xsk, error) {
		x.close()
		return nil, fmt.Errorf("afxdp: %s: %w", what, err)
	}
	x.umem, err = unix.Mmap(-1, 0, (2+extra)*half*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fail("mmap UMEM", err)
	}
	populateUMEM(x.umem)
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: uint32(frameSize)}
	if err := setsockoptPtr(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fail("XDP_UMEM_REG", err)
	}
	for _, o := range []struct {
		opt  int
		name string
	}{{unix.XDP_UMEM_FILL_RING, "XDP_UMEM_FILL_RING"}, {unix.XDP_UMEM_COMPLETION_RING, "XDP_UMEM_COMPLETION_RING"},
		{unix.XDP_RX_RING, "XDP_RX_RING"}, {unix.XDP_TX_RING, "XDP_TX_RING"}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, half); err != nil {
			return fail(o.name, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fail("XDP_MMAP_OFFSETS", err)
	}
	n := uint32(half)
	q := &rxq{fd: fd, first: 0, count: x.half}
	x.rxqs = []*rxq{q}
	if q.fill, err = mapRing(fd, &off.Fr, n, 8, unix.XDP_UMEM_PGOFF_FILL_RING, true); err != nil {
		return fail("mmap fill ring", err)
	}
	if x.comp, err = mapRing(fd, &off.Cr, n, 8, unix.XDP_UMEM_PGOFF_COMPLETION_RING, false); err != nil {
		return fail("mmap completion ring", err)
	}
	if q.rx, err = mapRing(fd, &off.Rx, n, unsafe.Sizeof(unix.XDPDesc{}), unix.XDP_PGOFF_RX_RING, false); err != nil {
		return fail("mmap rx ring", err)
	}
	if x.tx, err = mapRing(fd, &off.Tx, n, unsafe.Sizeof(unix.XDPDesc{}), unix.XDP_PGOFF_TX_RING, true); err != nil {
		return fail("mmap tx ring", err)
	}
	x.fillAll(q)
	return x, nil
}

// populateUMEM backs the packet memory with transparent huge pages where the kernel
// gives them on request (THP "madvise"; "always" gives them anyway, "never" not at all),
// then faults it all in, as MAP_POPULATE did. With 4 KiB pages each 4 KiB frame is a
// page of its own: a datagram's frame, taken in turn from 2048 of them each way, is a
// TLB miss for every copy into or out of it and every header read. Both calls are best
// effort: the memory works the same without them.
func populateUMEM(b []byte) {
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	if unix.Madvise(b, unix.MADV_POPULATE_WRITE) == nil {
		return
	}
	for i := 0; i < len(b); i += 4096 { // before Linux 5.14
		b[i] = 0
	}
}

// fillAll puts every frame of q into its fill ring, which holds exactly that many: a
// frame is always in the fill ring, with the kernel, or in the rx ring, so recycling one
// never finds the fill ring full.
func (x *xsk) fillAll(q *rxq) {
	for i := range q.count {
		*q.fill.addr(q.fill.local) = (q.first + i) * x.frameSize
		q.fill.local++
	}
	q.fill.publish()
}

// addQueue binds a further socket to queue of the interface, sharing the UMEM (in the
// first socket's mode: zero-copy or copy, need_wakeup), with frames of its own. The
// first socket must be bound.
func (x *xsk) addQueue(ifindex, queue int) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("afxdp: socket(AF_XDP) for queue %d: %w", queue, err)
	}
	k := uint64(len(x.rxqs))
	q := &rxq{fd: fd, queue: queue, first: (k + 1) * x.half, count: x.half, own: true}
	x.rxqs = append(x.rxqs, q) // closed with the others from here on
	fail := func(what string, err error) error {
		return fmt.Errorf("afxdp: queue %d: %s: %w", queue, what, err)
	}
	for _, o := range []struct {
		opt  int
		name string
	}{{unix.XDP_UMEM_FILL_RING, "XDP_UMEM_FILL_RING"}, {unix.XDP_UMEM_COMPLETION_RING, "XDP_UMEM_COMPLETION_RING"},
		{unix.XDP_RX_RING, "XDP_RX_RING"}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, int(x.half)); err != nil {
			return fail(o.name, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockoptPtr(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fail("XDP_MMAP_OFFSETS", err)
	}
	n := uint32(x.half)
	if q.fill, err = mapRing(fd, &off.Fr, n, 8, unix.XDP_UMEM_PGOFF_FILL_RING, true); err != nil {
		return fail("mmap fill ring", err)
	}
	if q.comp, err = mapRing(fd, &off.Cr, n, 8, unix.XDP_UMEM_PGOFF_COMPLETION_RING, false); err != nil {
		return fail("mmap completion ring", err)
	}
	if q.rx, err = mapRing(fd, &off.Rx, n, unsafe.Sizeof(unix.XDPDesc{}), unix.XDP_PGOFF_RX_RING, false); err != nil {
		return fail("mmap rx ring", err)
	}
	x.fillAll(q)
	sa := &unix.SockaddrXDP{Flags: unix.XDP_SHARED_UMEM, Ifindex: uint32(ifindex), QueueID: uint32(queue), SharedUmemFD: uint32(x.fd)}
	deadline := time.Now().Add(bindWait)
	for {
		err := unix.Bind(fd, sa)
		if err == nil {
			return nil
		}
		if err != unix.EBUSY || time.Now().After(deadline) {
			return fail("bind", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// bind binds the socket to the interface's queue: zero-copy unless copy, else (or when
// the driver has no zero-copy) copy mode; always asking for need_wakeup.
func (x *xsk) bind(ifindex, queue int, copyMode bool) error {
	sa := &unix.SockaddrXDP{Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	if !copyMode {
		sa.Flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_ZEROCOPY
		deadline := time.Now().Add(bindWait)
		for {
			err := unix.Bind(x.fd, sa)
			if err == nil {
				x.zeroCopy = x.optionsZeroCopy()
				return nil
			}
			if err != unix.EBUSY || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	sa.Flags = unix.XDP_USE_NEED_WAKEUP | unix.XDP_COPY
	// A socket closed a moment ago may still hold the queue: the kernel releases its
	// buffer pool from a work queue, after the close has returned. Wait for it a little.
	deadline := time.Now().Add(bindWait)
	for {
		err := unix.Bind(x.fd, sa)
		if err == nil {
			break
		}
		if err != unix.EBUSY || time.Now().After(deadline) {
			return fmt.Errorf("afxdp: bind to interface %d queue %d: %w", ifindex, queue, err)
		}
		time.Sleep(time.Millisecond)
	}
	x.zeroCopy = x.optionsZeroCopy()
	x.rxqs[0].queue = queue
	return nil
}

// raiseTxBudget lets one sendto transmit a whole tx ring in copy mode
// (XDP_MAX_TX_SKB_BUDGET, Linux 6.17): the kernel's default, 32 descriptors a call, makes
// a 64-packet batch cost two or three syscalls. Best effort: older kernels keep 32.
func (x *xsk) raiseTxBudget() {
	if unix.SetsockoptInt(x.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(x.tx.size)) == nil {
		x.txBudget = int(x.tx.size)
	} else {
		x.txBudget = 32
	}
}

// optionsZeroCopy asks the kernel which mode the bound socket is in (XDP_OPTIONS).
func (x *xsk) optionsZeroCopy() bool {
	var flags uint32
	if getsockoptPtr(x.fd, unix.SOL_XDP, unix.XDP_OPTIONS, unsafe.Pointer(&flags), 4) != nil {
		return false
	}
	return flags&unix.XDP_OPTIONS_ZEROCOPY != 0
}

// stats sums the kernel's counters over the sockets.
func (x *xsk) stats() (unix.XDPStatistics, error) {
	var sum unix.XDPStatistics
	for _, q := range x.rxqs {
		var s unix.XDPStatistics
		if err := getsockoptPtr(q.fd, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&s), unsafe.Sizeof(s)); err != nil {
			return sum, err
		}
		sum.Rx_dropped += s.Rx_dropped
		sum.Rx_invalid_descs += s.Rx_invalid_descs
		sum.Tx_invalid_descs += s.Tx_invalid_descs
		sum.Rx_ring_full += s.Rx_ring_full
		sum.Rx_fill_ring_empty_descs += s.Rx_fill_ring_empty_descs
		sum.Tx_ring_empty_descs += s.Tx_ring_empty_descs
	}
	return sum, nil
}

// rxFrame checks a receive descriptor of q against the UMEM: the packet must lie inside
// one of q's frames. It returns the frame's address for q's fill ring.
func (x *xsk) rxFrame(q *rxq, addr uint64, n uint32) (frame uint64, ok bool) {
	frame = addr - addr%x.frameSize
	if frame < q.first*x.frameSize || frame >= (q.first+q.count)*x.frameSize ||
		addr+uint64(n) > frame+x.frameSize || addr+uint64(n) < addr {
		return 0, false
	}
	return frame, true
}

// txFrame checks a completion entry: a send frame's address as this side posted it.
func (x *xsk) txFrame(addr uint64) bool {
	return addr%x.frameSize == 0 && addr >= x.half*x.frameSize && addr < 2*x.half*x.frameSize
}

// kickRx is the recvfrom that wakes the kernel's receive side of q (need_wakeup on the
// fill ring, and with SO_PREFER_BUSY_POLL the call that runs the driver's NAPI poll).
func kickRx(q *rxq) {
	unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(q.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
}

// kickTx is the sendto that makes the kernel transmit what the tx ring holds (in copy
// mode the transmission happens in this call, a budget of descriptors at a time, EAGAIN
// meaning more are left).
func (x *xsk) kickTx() unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(x.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

func (x *xsk) close() {
	for _, q := range x.rxqs {
		if q.own {
			unix.Close(q.fd)
		}
	}
	if x.fd >= 0 {
		unix.Close(x.fd)
		x.fd = -1
	}
	for _, q := range x.rxqs {
		for _, r := range []*ring{q.fill, q.rx, q.comp} {
			r.unmap()
		}
	}
	for _, r := range []*ring{x.comp, x.tx} {
		r.unmap()
	}
	if x.umem != nil {
		unix.Munmap(x.umem)
		x.umem = nil
	}
}

// nonEmpty reports whether the kernel has produced entries this side has not published
// as consumed: safe from any goroutine (it reads only the shared indexes).
func (r *ring) nonEmpty() bool { return atomic.LoadUint32(r.prod) != atomic.LoadUint32(r.cons) }

// nonEmptyProducer reports whether a producer ring holds entries the kernel has not
// consumed.
func (r *ring) nonEmptyProducer() bool { return atomic.LoadUint32(r.cons) != r.pub }
