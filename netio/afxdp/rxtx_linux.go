//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/goverbs/goverbs/netio"
	"golang.org/x/sys/unix"
)

// ReadBatch waits until at least one datagram has arrived and copies up to len(msgs)
// of them (at most 64) into the messages' buffers: a datagram longer than its buffer is
// cut to it. In the default mode it parks in Go's netpoller; with BusyPoll it spins.
func (c *Conn) ReadBatch(msgs []netio.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if c.closed.Load() {
			return 0, c.closedErr("read")
		}
		if n := c.receive(msgs); n > 0 {
			return n, nil
		}
		if c.kickRx() {
			if n := c.receiveRing(msgs); n > 0 {
				return n, nil
			}
		}
		if c.busy {
			runtime.Gosched()
			continue
		}
		c.arm()
		if err := c.eprc.Read(c.readyFn); err != nil {
			if c.closed.Load() {
				return 0, c.closedErr("read")
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Interrupt's past deadline: clear it for the next read. An Interrupt
				// after this read returned and before the clear is not lost: its caller
				// set what the interrupted goroutine looks at next (netio.Interrupter).
				c.ep.SetReadDeadline(time.Time{})
				return 0, fmt.Errorf("afxdp: read %v: %w", c.local, netio.ErrInterrupted)
			}
			return 0, fmt.Errorf("afxdp: read %v: %w", c.local, err)
		}
	}
}

// Interrupt ends a ReadBatch blocked in the netpoller, or else the next one, with
// netio.ErrInterrupted (netio.Interrupter): a read deadline in the past wakes the reader
// the netpoller parked. A busy-poll Conn is not interruptible (CanInterrupt).
func (c *Conn) Interrupt() {
	if c.ep != nil {
		c.ep.SetReadDeadline(longAgo)
	}
}

// CanInterrupt reports whether Interrupt works: in the default mode
// (netio.InterruptibleConn).
func (c *Conn) CanInterrupt() bool { return !c.busy }

// longAgo is a read deadline that has passed.
var longAgo = time.Unix(1, 0)

// Unwatch takes the socket out of the epoll instance the netpoller waits on, until the
// next ReadBatch that has to wait (netio.Unwatcher): while a program reads the Conn only
// by polling, each packet then wakes no runtime thread for nothing. It waits for a
// ReadBatch in progress, and does nothing in busy-poll mode or on a closed Conn.
func (c *Conn) Unwatch() {
	if c.busy {
		return
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed.Load() || !c.armed {
		return
	}
	if c.eprc.Control(c.disarmFn) == nil && c.ctlErr == nil {
		c.armed = false
	}
}

// arm puts the socket back into the epoll instance after Unwatch. rmu is held.
func (c *Conn) arm() {
	if c.armed {
		return
	}
	if c.eprc.Control(c.armFn) == nil && c.ctlErr == nil {
		c.armed = true
	}
}

// armOnce and disarmOnce are arm's and Unwatch's epoll_ctl on the instance (made once:
// a closure per call would allocate on ReadBatch's way back from polling).
func (c *Conn) armOnce(epfd uintptr) {
	c.ctlErr = nil
	for _, q := range c.x.rxqs {
		c.evIn = unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(q.fd)}
		if err := unix.EpollCtl(int(epfd), unix.EPOLL_CTL_ADD, q.fd, &c.evIn); err != nil && err != unix.EEXIST {
			c.ctlErr = err
		}
	}
}

func (c *Conn) disarmOnce(epfd uintptr) {
	c.ctlErr = nil
	for _, q := range c.x.rxqs {
		if err := unix.EpollCtl(int(epfd), unix.EPOLL_CTL_DEL, q.fd, nil); err != nil && err != unix.ENOENT {
			c.ctlErr = err
		}
	}
}

// PollBatch reads what has arrived, without waiting: 0 when nothing has (netio.Poller).
// On an empty ring it makes the recvfrom that drives the kernel (its busy polling, when
// the socket has it, or a fill ring that needs a wakeup) and looks once more.
func (c *Conn) PollBatch(msgs []netio.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed.Load() {
		return 0, c.closedErr("read")
	}
	n := c.receive(msgs)
	if n == 0 && c.kickRx() {
		n = c.receiveRing(msgs)
	}
	return n, nil
}

// WaitReadable blocks until a datagram has arrived, the timeout passes (never, when
// negative) or the Conn closes, reading nothing (netio.Poller). It waits in poll(2) on
// the socket and an eventfd Close writes to.
func (c *Conn) WaitReadable(timeout time.Duration) (bool, error) {
	c.waitMu.RLock()
	defer c.waitMu.RUnlock()
	if c.closed.Load() {
		return false, c.closedErr("wait")
	}
	for _, q := range c.x.rxqs {
		if q.rx.nonEmpty() {
			return true, nil
		}
		if q.fill.needWakeup() {
			c.rxKicks.Add(1)
			kickRx(q)
		}
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	lpfd := int32(-1) // poll(2) ignores a negative descriptor
	if c.lp != nil {
		lpfd = int32(c.lp.fd)
	}
	var all [2 + MaxQueues]unix.PollFd
	for {
		all[0] = unix.PollFd{Fd: int32(c.evfd), Events: unix.POLLIN}
		all[1] = unix.PollFd{Fd: lpfd, Events: unix.POLLIN}
		for i, q := range c.x.rxqs {
			all[2+i] = unix.PollFd{Fd: int32(q.fd), Events: unix.POLLIN}
		}
		fds := all[:2+len(c.x.rxqs)]
		n, err := unix.Poll(fds, ms)
		if c.closed.Load() {
			return false, c.closedErr("wait")
		}
		switch {
		case err == unix.EINTR:
			continue // the timeout restarts: a signal-heavy program waits longer, never shorter
		case err != nil:
			return false, fmt.Errorf("afxdp: wait %v: %w", c.local, err)
		case n == 0:
			return false, nil
		}
		if fds[1].Revents&unix.POLLIN != 0 {
			c.lpReady.Store(true)
			return true, nil
		}
		for i, q := range c.x.rxqs {
			if fds[2+i].Revents&unix.POLLIN != 0 || q.rx.nonEmpty() {
				return true, nil
			}
		}
		return false, nil
	}
}

// localEvery: while nothing says the local path holds datagrams, it is still read every
// localEvery-th receive, so that a busy ring (or a missed hint) never starves it.
const localEvery = 64

// receive fills msgs from the local path when it may hold something (see localEvery),
// first, so that a ring busy enough to fill every batch does not starve it, and from
// the rx ring. rmu is held.
func (c *Conn) receive(msgs []netio.Message) int {
	n := 0
	if c.lp != nil {
		c.lpCalls++
		if c.lpReady.Load() || c.lpCalls >= localEvery {
			c.lpCalls = 0
			c.lpReady.Store(false)
			n = c.lp.recv(msgs)
			if n == len(msgs) {
				c.lpReady.Store(true) // there may be more
			}
			c.rxLocal.Add(uint64(n))
			c.rxPackets.Add(uint64(n))
		}
	}
	return n + c.receiveRing(msgs[n:])
}

// receiveRing takes up to len(msgs) (at most 64) descriptors off the rx ring, copies the
// datagrams they hold into msgs, returns their frames to the fill ring and reports how
// many messages it filled. A descriptor or frame that does not check out is dropped
// and counted. rmu is held.
func (c *Conn) receiveRing(msgs []netio.Message) int {
	n, k := 0, len(c.x.rxqs)
	for i := range k {
		if n == len(msgs) {
			break
		}
		n += c.receiveQueue(c.x.rxqs[(c.rr+i)%k], msgs[n:])
	}
	c.rr = (c.rr + 1) % k // the next call starts at the next queue: none starves
	return n
}

// receiveQueue is receiveRing's work on one queue's rings.
func (c *Conn) receiveQueue(q *rxq, msgs []netio.Message) int {
	x := c.x
	avail := q.rx.available()
	if avail == 0 || len(msgs) == 0 {
		return 0
	}
	avail = min(avail, uint32(min(len(msgs), batchSize)))
	n := 0
	for i := range avail {
		d := q.rx.desc(q.rx.local + i)
		addr, size := d.Addr, d.Len
		frame, ok := x.rxFrame(q, addr, size)
		if !ok {
			c.rxMalformed.Add(1) // not a frame of ours: nothing to give back
			continue
		}
		p, why := parseFrame(x.umem[addr:addr+uint64(size)], c.local)
		switch why {
		case dropNone:
			m := &msgs[n]
			m.N = copy(m.Buf, p.payload)
			m.Addr = p.src
			m.SegSize = 0
			m.ECN, m.TrafficClass = p.ecn, p.tc
			n++
		case dropMalformed:
			c.rxMalformed.Add(1)
		default:
			c.rxNotOurs.Add(1)
		}
		*q.fill.addr(q.fill.local) = frame
		q.fill.local++
	}
	q.rx.release(avail)
	q.fill.publish()
	c.rxPackets.Add(uint64(n))
	if c.kbusy && !c.zc && (!q.napiKnown() || q.noNAPI) {
		c.checkNAPI(q)
	}
	return n
}

// napiRecheck is how many received batches a queue whose socket has no NAPI instance
// waits before it asks again (checkNAPI): the kernel marks the socket with the first
// instance it sees, so one may appear later, but not often enough to ask each time.
const napiRecheck = 4096

// napiKnown reports whether the queue's NAPI instance has been asked for since a
// packet arrived (checkNAPI).
func (q *rxq) napiKnown() bool { return q.napiAsk != 0 }

// checkNAPI runs after a busy-poll copy-mode queue received a batch: until the kernel
// names a NAPI instance for the socket, and then every napiRecheck batches while it
// names none, it asks (SO_INCOMING_NAPI_ID). Without one, the busy-poll recvfrom of an
// empty poll neither polls a driver (nothing to busy-poll) nor wakes one (copy mode
// needs no rx wakeup): veth's queue is one, whose packets are received by the sender's
// softirq. kickRx then leaves it out, and an empty poll reads the rings without a
// system call. rmu is held.
func (c *Conn) checkNAPI(q *rxq) {
	if q.napiAsk > 1 {
		q.napiAsk--
		return
	}
	q.noNAPI = napiID(q.fd) == 0
	q.napiAsk = napiRecheck
}

// txWait bounds how long WriteBatch waits for a send frame to come back before it
// reports the Conn as failed (a link that is down, a driver that never completes).
const txWait = time.Second

// WriteBatch sends every datagram of msgs (a run with SegSize as its separate
// datagrams): headers built here, payload copied into a UMEM frame, the frames posted to
// the tx ring a batch at a time. A datagram that cannot go (no neighbour entry, longer
// than the MTU, a destination of the other family) is skipped and reported in a
// *netio.SendError, as the UDP backend reports the kernel's refusals.
func (c *Conn) WriteBatch(msgs []netio.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return 0, c.closedErr("write")
	}
	// Take back what the kernel has completed before taking frames: txFree is a stack,
	// so the frames sent last (in copy mode, by the last batch's kick), still in this
	// CPU's cache, are written again, not the coldest of the send half.
	c.reclaim()
	var first *netio.SendError
	skipped := 0
	fail := func(mi, datagrams int, err error) {
		skipped += datagrams
		// The lowest index: the local path's refusals are heard at its flush, after
		// later messages' ring failures.
		if first == nil || mi < first.Index {
			first = &netio.SendError{Index: mi, Addr: msgs[mi].Addr, Err: err}
		}
	}
	failLocal := func(mi int, err error) { fail(mi, 1, err) }
	x := c.x
	hl := headerLen(c.v6)
	var hop netip.Addr // the destination mac was resolved for
	var mac [6]byte
	hopLocal := false // hop is on this host: the local path
	var t *txTemplate // the headers of the datagrams to the last destination
	now := time.Now()
	// The datagrams sent, counted once per batch rather than with an atomic add each.
	var sent, sentLocal uint64
	queuedLocal := false // datagrams wait in the local path's batch
	flushLocal := func() {
		if queuedLocal {
			n, calls := c.lp.flush(failLocal)
			sentLocal += uint64(n)
			c.txLocalCalls.Add(uint64(calls))
			queuedLocal = false
		}
	}
	defer func() {
		if sent+sentLocal > 0 {
			c.txPackets.Add(sent + sentLocal)
		}
		if sentLocal > 0 {
			c.txLocal.Add(sentLocal)
		}
	}()
	for mi := range msgs {
		m := &msgs[mi]
		if len(m.Iov) > netio.MaxIov {
			fail(mi, m.NumSegments(), netio.ErrTooManyIov)
			continue
		}
		if !dataHolds(m) {
			// N beyond the data would send what earlier datagrams left in the frame.
			fail(mi, 1, unix.EINVAL)
			continue
		}
		dst := m.Addr
		if a := dst.Addr(); a.Is4In6() {
			dst = netip.AddrPortFrom(a.Unmap(), dst.Port())
		}
		if !dst.Addr().IsValid() || dst.Addr().Is6() != c.v6 {
			fail(mi, m.NumSegments(), netio.ErrAddressFamily)
			continue
		}
		if dst.Addr().IsMulticast() {
			// Multicast goes through the kernel, which sends it out of the interface and
			// loops it back to this host's members (see JoinGroup).
			hop, hopLocal = dst.Addr(), true
			if c.lp == nil {
				fail(mi, m.NumSegments(), fmt.Errorf("afxdp: multicast to %v needs the local path (%v): %w", dst.Addr(), c.lpErr, unix.ENETUNREACH))
				continue
			}
		} else if a := dst.Addr(); a == c.memo.hop && now.Before(c.memo.until) {
			hop, hopLocal, mac = a, false, c.memo.mac // lookup would say the same
		} else if a != hop || !hop.IsValid() {
			hw, until, err := c.neigh.lookup(a, now)
			switch {
			case err == errLocal && c.lp != nil:
				hop, hopLocal = a, true
			case err == errLocal:
				fail(mi, m.NumSegments(), fmt.Errorf("afxdp: %v is on this host, and there is no local path (%v): %w", a, c.lpErr, unix.ENETUNREACH))
				continue
			case err != nil:
				c.txNoNeigh.Add(uint64(m.NumSegments()))
				fail(mi, m.NumSegments(), err)
				continue
			default:
				hop, hopLocal, mac = a, false, hw
				c.memo = neighMemo{hop: a, mac: hw, until: until}
			}
		}
		seg := m.N
		if m.SegSize > 0 && m.SegSize < m.N {
			seg = m.SegSize
		}
		segs := m.NumSegments()
		if hopLocal {
			for i := range segs {
				off := i * seg
				queuedLocal = true
				if c.lp.add(m, off, min(seg, m.N-off), dst, mi) {
					flushLocal() // full
				}
			}
			continue
		}
		if t == nil || t.dst != dst || t.dstMAC != mac {
			t = c.template(dst, mac)
		}
		for i := range segs {
			off := i * seg
			size := min(seg, m.N-off)
			if size > c.maxData || hl+size > int(x.frameSize) {
				c.txTooBig.Add(1)
				fail(mi, 1, unix.EMSGSIZE)
				continue
			}
			addr, err := c.takeTxFrame()
			if err != nil {
				flushLocal()
				if first != nil {
					first.Skipped = skipped
				}
				return mi, err
			}
			f := x.umem[addr : addr+x.frameSize]
			m.CopyData(f[hl:hl+size], off)
			t.put(f, size, netio.DSField(m.TrafficClass, m.ECN))
			d := x.tx.desc(x.tx.local)
			d.Addr, d.Len, d.Options = addr, uint32(hl+size), 0
			x.tx.local++
			sent++
			if x.tx.pending() >= batchSize {
				c.flushTx()
			}
		}
	}
	c.flushTx()
	flushLocal()
	if first != nil {
		first.Skipped = skipped
		return len(msgs), first
	}
	return len(msgs), nil
}

// txTemplates is how many destinations' header templates a Conn keeps: an RC
// responder's ACKs to a few requesters, or a requester's streams to a few responders,
// interleave within a batch without rebuilding them.
const txTemplates = 8

// template returns the header template for datagrams to dst through the neighbour at
// mac, building it over the least recently built one when none is kept. wmu is held.
func (c *Conn) template(dst netip.AddrPort, mac [6]byte) *txTemplate {
	for i := range c.tmpls {
		if t := &c.tmpls[i]; t.n != 0 && t.dst == dst && t.dstMAC == mac {
			return t
		}
	}
	t := &c.tmpls[c.tmplNext]
	c.tmplNext = (c.tmplNext + 1) % len(c.tmpls)
	t.build(c.srcMAC, mac, c.local, dst, c.ttl)
	return t
}

// dataHolds reports whether m's data (Buf, or the Iov slices) holds its N bytes.
func dataHolds(m *netio.Message) bool {
	if m.N < 0 {
		return false
	}
	if m.Iov == nil {
		return m.N <= len(m.Buf)
	}
	have := 0
	for _, v := range m.Iov {
		have += len(v)
	}
	return m.N <= have
}

// takeTxFrame returns a free send frame, taking back what the kernel completed first,
// and when none is free pushing out what is queued and waiting for completions (up to
// txWait). wmu is held.
func (c *Conn) takeTxFrame() (uint64, error) {
	if len(c.txFree) == 0 {
		c.reclaim()
	}
	var start time.Time
	for spins := 0; len(c.txFree) == 0; spins++ {
		if c.closed.Load() {
			return 0, c.closedErr("write")
		}
		c.flushTx()
		c.reclaim()
		if len(c.txFree) > 0 {
			break
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > txWait {
			return 0, fmt.Errorf("afxdp: write %v: no send frame came back in %v: %w", c.local, txWait, unix.ENOBUFS)
		}
		if spins < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	a := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	return a, nil
}

// reclaim takes the frames of completed sends off the completion ring.
func (c *Conn) reclaim() {
	x := c.x
	n := x.comp.available()
	for i := range n {
		a := *x.comp.addr(x.comp.local + i)
		if x.txFrame(a) {
			c.txFree = append(c.txFree, a)
		} else {
			c.rxMalformed.Add(1)
		}
	}
	if n > 0 {
		x.comp.release(n)
	}
}

// flushTx publishes the tx ring's new entries and, when the kernel asks for it (always
// in copy mode, where the sending happens in the call), makes the sendto that sends
// them. EAGAIN means the call's budget ran out with descriptors left: call again.
func (c *Conn) flushTx() {
	x := c.x
	x.tx.publish()
	if !x.tx.nonEmptyProducer() || !x.tx.needWakeup() {
		return // nothing the kernel has not taken yet, or it needs no call
	}
	for range 1024 {
		c.txKicks.Add(1)
		switch x.kickTx() {
		case unix.EAGAIN, unix.EINTR:
			c.reclaim()
			if !x.tx.nonEmptyProducer() {
				return
			}
			continue
		}
		return
	}
}

// kickRx makes the recvfrom that wakes the kernel's receive side of each queue whose
// fill ring asks for it, and with busy polling the one that drives one queue's NAPI
// poll (a queue per call, in turn: a syscall per queue on every empty poll would cost
// more than it finds; none for a queue without a NAPI instance, checkNAPI), counted. It reports whether it made any. rmu is held.
func (c *Conn) kickRx() bool {
	kicked := false
	busy := -1
	if c.kbusy {
		busy = c.rr % len(c.x.rxqs)
	}
	for i, q := range c.x.rxqs {
		if (i == busy && !q.noNAPI) || q.fill.needWakeup() {
			c.rxKicks.Add(1)
			kickRx(q)
			kicked = true
		}
	}
	return kicked
}
