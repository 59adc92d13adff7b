//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cilium/ebpf/rlimit"
	"github.com/goverbs/goverbs/netio"
	"golang.org/x/sys/unix"
)

// Conn is an AF_XDP socket carrying the UDP datagrams to one address and port: a
// netio.Conn, and a netio.Poller. See the package documentation.
type Conn struct {
	x        *xsk
	steer    *steering
	neigh    *neighbours
	ifindex  int
	ifname   string
	queue    int
	queues   []int // queue first
	rr       int   // the receive queue read first next time; rmu guards it
	mtu      int
	maxData  int // the largest UDP payload one frame and the MTU carry
	srcMAC   [6]byte
	local    netip.AddrPort
	v6       bool
	ttl      uint8
	busy     bool
	kbusy    bool // the kernel accepted the busy-poll socket options
	zc       bool // zero-copy
	half     int  // UMEM bytes for each direction
	generic  bool // the program runs in generic XDP
	txBudget int
	closed   atomic.Bool

	// The default mode's wait: an epoll instance watching the socket for EPOLLIN, in Go's
	// netpoller (as netio's UDP backend does with its receive socket). The socket itself
	// is never handed to the netpoller, which would also watch it for EPOLLOUT and wake a
	// thread for every transmit completion.
	ep      *os.File // set by Open, never changed after (Interrupt reads it from any goroutine)
	eprc    syscall.RawConn
	readyFn func(uintptr) bool
	// Unwatch and arm: whether the socket is in the instance, and the epoll_ctl calls'
	// state, made once (rmu guards them).
	armed           bool
	evIn            unix.EpollEvent
	ctlErr          error
	armFn, disarmFn func(uintptr)

	// WaitReadable waits in poll(2) on the socket and evfd, which Close writes to. waitMu
	// is held shared by waiters and by Stats, exclusively by Close before it releases the
	// socket.
	evfd   int
	waitMu sync.RWMutex

	rmu sync.Mutex // the receive side: rx and fill rings
	wmu sync.Mutex // the send side: tx and completion rings, txFree, the neighbour cache

	txFree []uint64 // send frames this side holds
	memo   neighMemo
	// Header templates of recent destinations (WriteBatch); wmu guards them.
	tmpls    [txTemplates]txTemplate
	tmplNext int

	// The local path (local_linux.go): nil where the address and port were taken.
	lp      *localPath
	lpErr   error
	lpReady atomic.Bool // the local path may hold datagrams: read it on the next receive
	lpCalls uint32      // receives since the local path was last read; rmu guards it
	events  [MaxQueues + 1]unix.EpollEvent

	netns int // the network namespace Open ran in (netns_linux.go)

	rxPackets, txPackets, rxMalformed, rxNotOurs, txNoNeigh, txTooBig, rxLocal, txLocal, rxKicks, txKicks, txLocalCalls atomic.Uint64
}

var _ netio.Conn = (*Conn)(nil)
var _ netio.Poller = (*Conn)(nil)
var _ netio.Multicaster = (*Conn)(nil)
var _ netio.InterruptibleConn = (*Conn)(nil)
var _ netio.Unwatcher = (*Conn)(nil)

// Open binds an AF_XDP socket as opts say, loads and attaches the steering program, and
// returns the Conn. Everything it creates that belongs to a network namespace (the
// socket, the link, the netlink socket) is made in the calling thread's namespace.
func Open(opts Options) (*Conn, error) {
	if err := checkCapabilities(); err != nil {
		return nil, err
	}
	frames, frameSize := opts.Frames, opts.FrameSize
	if frames == 0 {
		frames = defaultFrames
	}
	if frameSize == 0 {
		frameSize = defaultFrameSize
	}
	if frames < 4*batchSize || frames&(frames-1) != 0 || frames > 1<<20 {
		return nil, fmt.Errorf("afxdp: Frames %d: want a power of two from %d to %d", frames, 4*batchSize, 1<<20)
	}
	if frameSize != 2048 && frameSize != 4096 {
		return nil, fmt.Errorf("afxdp: FrameSize %d: want 2048 or 4096", frameSize)
	}
	queues := append([]int{opts.Queue}, opts.Queues...)
	if len(queues) > MaxQueues {
		return nil, fmt.Errorf("afxdp: %d queues: at most %d", len(queues), MaxQueues)
	}
	for i, q := range queues {
		if q < 0 || q > 1<<16 {
			return nil, fmt.Errorf("afxdp: queue %d out of range", q)
		}
		for _, p := range queues[:i] {
			if p == q {
				return nil, fmt.Errorf("afxdp: queue %d named twice", q)
			}
		}
	}
	addr := opts.Addr.Addr()
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, fmt.Errorf("afxdp: Addr %v: want a unicast address of the interface", opts.Addr)
	}
	port := opts.Addr.Port()
	if port == 0 {
		port = defaultPort
	}
	c := &Conn{local: netip.AddrPortFrom(addr, port), v6: addr.Is6(), ttl: opts.TTL, busy: opts.BusyPoll,
		queue: opts.Queue, queues: queues, evfd: -1, netns: -1}
	if c.ttl == 0 {
		c.ttl = DefaultTTL
	}
	ifi, err := interfaceFor(opts.Interface, addr)
	if err != nil {
		return nil, err
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afxdp: interface %s has no Ethernet address", ifi.Name)
	}
	c.ifindex, c.ifname, c.mtu, c.srcMAC = ifi.Index, ifi.Name, ifi.MTU, [6]byte(ifi.HardwareAddr)
	ipHdr := ipv4HeaderLen
	if c.v6 {
		ipHdr = ipv6HeaderLen
	}
	// A received frame starts XDP_PACKET_HEADROOM into its UMEM frame.
	if c.mtu+ethHeaderLen > frameSize-unix.XDP_PACKET_HEADROOM {
		return nil, fmt.Errorf("afxdp: interface %s MTU %d does not fit a %d-byte frame (at most %d): lower the MTU or use 4096-byte frames",
			ifi.Name, c.mtu, frameSize, frameSize-unix.XDP_PACKET_HEADROOM-ethHeaderLen)
	}
	c.maxData = c.mtu - ipHdr - udpHeaderLen
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones to the memory
	// cgroup, and this does nothing.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	if c.netns, err = openNetns(); err != nil {
		return nil, err
	}
	if c.x, err = newXSK(frames, frameSize, len(queues)-1); err != nil {
		return nil, err
	}
	if err := c.x.bind(c.ifindex, c.queue, opts.Copy); err != nil {
		return nil, err
	}
	for _, q := range queues[1:] {
		if err := c.x.addQueue(c.ifindex, q); err != nil {
			return nil, err
		}
	}
	if !c.x.zeroCopy {
		c.x.raiseTxBudget()
		c.txBudget = c.x.txBudget
	}
	if c.steer, err = loadSteering(c.local, slices.Max(queues)); err != nil {
		return nil, err
	}
	for _, q := range c.x.rxqs {
		if err := c.steer.xsks.Put(uint32(q.queue), uint32(q.fd)); err != nil {
			return nil, fmt.Errorf("afxdp: add the socket of queue %d to the XSKMAP: %w", q.queue, err)
		}
	}
	if err := c.steer.attach(c.ifindex, opts.GenericXDP); err != nil {
		return nil, err
	}
	c.generic = c.steer.generic
	if c.neigh, err = newNeighbours(c.ifindex, addr); err != nil {
		return nil, err
	}
	if c.lp, c.lpErr = openLocalPath(c.local, c.ifindex); c.lpErr != nil {
		c.lpErr = fmt.Errorf("afxdp: local path on %v: %w", c.local, c.lpErr)
	}
	c.lpReady.Store(true)
	c.zc, c.half = c.x.zeroCopy, int(c.x.half*c.x.frameSize)
	for i := c.x.half; i < 2*c.x.half; i++ {
		c.txFree = append(c.txFree, i*c.x.frameSize)
	}
	if c.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		c.evfd = -1
		return nil, fmt.Errorf("afxdp: eventfd: %w", err)
	}
	if c.busy {
		if opts.BusyPollUsecs >= 0 {
			c.kbusy = c.setBusyPoll(opts)
		}
	} else if err := c.watch(); err != nil {
		return nil, err
	}
	c.readyFn = c.ready
	ok = true
	return c, nil
}

// interfaceFor finds the interface named, or else the one holding addr, and checks that
// it holds addr: the kernel must own the address too, to answer ARP and ICMP for it.
func interfaceFor(name string, addr netip.Addr) (*net.Interface, error) {
	if name == "" {
		ifi, ok := netio.InterfaceOf(addr)
		if !ok {
			return nil, fmt.Errorf("afxdp: no interface holds %v", addr)
		}
		return &ifi, nil
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("afxdp: interface %q: %w", name, err)
	}
	if got, ok := netio.InterfaceOf(addr); !ok || got.Index != ifi.Index {
		return nil, fmt.Errorf("afxdp: interface %s does not hold %v (ip addr add it there)", name, addr)
	}
	return ifi, nil
}

// setBusyPoll asks the kernel to busy-poll the socket's queue when this side reads it
// (SO_BUSY_POLL, the time it may spin; SO_PREFER_BUSY_POLL, let the application's polls
// rather than interrupts drive the queue, with the interface's napi_defer_hard_irqs and
// gro_flush_timeout; SO_BUSY_POLL_BUDGET, packets per poll). It reports whether all three
// were accepted (Linux 5.11 and later).
func (c *Conn) setBusyPoll(opts Options) bool {
	usecs, budget := opts.BusyPollUsecs, opts.BusyPollBudget
	if usecs <= 0 {
		usecs = defaultBusyUsecs
	}
	if budget <= 0 {
		budget = defaultBudget
	}
	ok := true
	for _, q := range c.x.rxqs {
		e1 := unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_PREFER_BUSY_POLL, 1)
		e2 := unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, usecs)
		e3 := unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL_BUDGET, budget)
		ok = ok && e1 == nil && e2 == nil && e3 == nil
	}
	return ok
}

// watch puts the socket in an epoll instance of the Conn's own, level-triggered for
// EPOLLIN, and the instance in Go's netpoller.
func (c *Conn) watch() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("afxdp: epoll_create1: %w", err)
	}
	for _, q := range c.x.rxqs {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(q.fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, q.fd, &ev); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("afxdp: epoll_ctl: %w", err)
		}
	}
	if c.lp != nil {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.lp.fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.lp.fd, &ev); err != nil {
			unix.Close(epfd)
			return fmt.Errorf("afxdp: epoll_ctl: %w", err)
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("afxdp: epoll instance: %w", err)
	}
	c.armed = true
	c.armFn, c.disarmFn = c.armOnce, c.disarmOnce
	c.ep = os.NewFile(uintptr(epfd), "afxdp-epoll") // non-blocking: into the netpoller
	if c.eprc, err = c.ep.SyscallConn(); err != nil {
		return fmt.Errorf("afxdp: epoll instance: %w", err)
	}
	return nil
}

// ready is the netpoller wait's condition: a packet in the rx ring, a datagram on the
// local path, or the Conn closed. It runs inside ReadBatch, which holds rmu, so the
// rings are still mapped. For the local path it asks the epoll instance (epfd, without
// waiting): the netpoller wakes the reader once per change of the instance, so a
// datagram there must be noticed now, or it would wait for the next packet.
func (c *Conn) ready(epfd uintptr) bool {
	if c.closed.Load() {
		return true
	}
	for _, q := range c.x.rxqs {
		if q.rx.available() > 0 {
			return true
		}
	}
	if c.lp == nil {
		return false
	}
	n, _ := unix.EpollWait(int(epfd), c.events[:], 0)
	for _, ev := range c.events[:max(n, 0)] {
		if ev.Fd == int32(c.lp.fd) {
			c.lpReady.Store(true)
		}
	}
	return c.lpReady.Load()
}

// release frees what Open made, in the reverse order: the program goes first, so that
// nothing more is redirected to the socket.
func (c *Conn) release() error {
	var errs []error
	if c.ep != nil && !c.closed.Load() {
		errs = append(errs, c.ep.Close()) // Open failed (Close has closed it already)
	}
	if c.steer != nil {
		errs = append(errs, c.steer.close())
		c.steer = nil
	}
	if c.neigh != nil {
		c.neigh.close()
		c.neigh = nil
	}
	if c.lp != nil {
		c.lp.close()
		c.lp = nil
	}
	if c.x != nil {
		c.x.close()
		c.x = nil
	}
	if c.evfd >= 0 {
		unix.Close(c.evfd)
		c.evfd = -1
	}
	if c.netns >= 0 {
		unix.Close(c.netns)
		c.netns = -1
	}
	return errors.Join(errs...)
}

// LocalAddr is the address and port the program steers into the socket.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// SourceAddr is LocalAddr: datagrams leave from the port they are received at.
func (c *Conn) SourceAddr() netip.AddrPort { return c.local }

// Caps: batches of up to 64; no GSO and no GRO (each datagram is one frame, built and
// parsed here); IPv4 datagrams leave with DF set and Identification 0; ECN both ways
// (the codepoint is written into and read from the IP header here, at no cost, and the
// local path and groups carry it in control messages). RecvBuf and SendBuf are the
// UMEM's bytes for each direction. SplitAcks: a kick in copy mode delivers its frames
// before it returns (on veth into the peer's ring), and in zero-copy mode a frame
// published goes without a call at all, so a busy-poll device's requests leave
// before their ACK's datagram is built.
func (c *Conn) Caps() netio.Caps {
	return netio.Caps{BatchSize: batchSize, MaxSegments: 1, RecvBuf: c.half, SendBuf: c.half, IPv4IDZero: !c.v6, ECN: true, SplitAcks: true}
}

// Mode reports whether the socket runs zero-copy or in copy mode.
func (c *Conn) Mode() Mode {
	if c.zc {
		return ModeZeroCopy
	}
	return ModeCopy
}

func (c *Conn) String() string {
	i := c.Info()
	xdp := "native"
	if i.GenericXDP {
		xdp = "generic"
	}
	return fmt.Sprintf("AF_XDP %s queue %d (%s, %s XDP)", i.Interface, i.Queue, i.Mode, xdp)
}

// Info describes the socket.
func (c *Conn) Info() Info {
	return Info{Interface: c.ifname, Queue: c.queue, Queues: slices.Clone(c.queues), MTU: c.mtu, Mode: c.Mode(), GenericXDP: c.generic,
		BusyPoll: c.busy, KernelBusyPoll: c.kbusy, LocalPath: c.lpErr == nil, LocalPathErr: c.lpErr, TxBudget: c.txBudget}
}

// EachCounter lists the Conn's mode and counters for the device's (netio.Counting):
// xdp_zerocopy and xdp_generic say how the socket and the program run (1 or 0), the rest
// are Stats.
func (c *Conn) EachCounter(f func(name string, value uint64)) {
	b := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	s := c.Stats()
	f("xdp_zerocopy", b(c.Mode() == ModeZeroCopy))
	f("xdp_generic", b(c.generic))
	f("xdp_rx_pkts", s.RxPackets)
	f("xdp_tx_pkts", s.TxPackets)
	f("xdp_rx_local", s.RxLocal)
	f("xdp_tx_local", s.TxLocal)
	f("xdp_rx_malformed", s.RxMalformed)
	f("xdp_rx_not_ours", s.RxNotOurs)
	f("xdp_tx_no_neighbour", s.TxNoNeighbour)
	f("xdp_tx_too_big", s.TxTooBig)
	f("xdp_rx_kicks", s.RxKicks)
	f("xdp_tx_kicks", s.TxKicks)
	f("xdp_tx_local_calls", s.TxLocalCalls)
	f("xdp_kernel_rx_dropped", s.KernelRxDropped)
	f("xdp_kernel_rx_ring_full", s.KernelRxRingFull)
	f("xdp_kernel_fill_ring_empty", s.KernelFillRingEmpty)
}

// Stats returns the Conn's counters and the kernel's.
func (c *Conn) Stats() Stats {
	s := Stats{
		RxPackets: c.rxPackets.Load(), TxPackets: c.txPackets.Load(),
		RxMalformed: c.rxMalformed.Load(), RxNotOurs: c.rxNotOurs.Load(),
		TxNoNeighbour: c.txNoNeigh.Load(), TxTooBig: c.txTooBig.Load(),
		RxLocal: c.rxLocal.Load(), TxLocal: c.txLocal.Load(),
		RxKicks: c.rxKicks.Load(), TxKicks: c.txKicks.Load(), TxLocalCalls: c.txLocalCalls.Load(),
	}
	c.waitMu.RLock()
	defer c.waitMu.RUnlock()
	if !c.closed.Load() {
		if k, err := c.x.stats(); err == nil {
			s.KernelRxDropped, s.KernelRxInvalid, s.KernelTxInvalid = k.Rx_dropped, k.Rx_invalid_descs, k.Tx_invalid_descs
			s.KernelRxRingFull, s.KernelFillRingEmpty, s.KernelTxRingEmpty = k.Rx_ring_full, k.Rx_fill_ring_empty_descs, k.Tx_ring_empty_descs
		}
	}
	return s
}

// Close detaches the program, closes the socket and unblocks readers and waiters.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	var err error
	if c.ep != nil {
		err = c.ep.Close() // ends a ReadBatch blocked in the netpoller
	}
	var one [8]byte
	one[0] = 1
	unix.Write(c.evfd, one[:]) // ends WaitReadable's poll; stays readable for later ones
	// Wait for every user of the rings and the socket to leave: readers and writers see
	// closed and return, waiters wake from the eventfd.
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return errors.Join(err, c.release())
}

func (c *Conn) closedErr(op string) error {
	return fmt.Errorf("afxdp: %s %v: %w", op, c.local, net.ErrClosed)
}
