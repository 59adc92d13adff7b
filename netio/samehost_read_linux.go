//go:build linux

// The same-host shortcut's receive side: reading the rings and the UDP socket, and
// waiting for either in the default and busy-poll modes.

package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// udpEvery is how many polls of the rings come between two reads of the UDP socket
// while the rings carry traffic and the socket has been quiet: a poll of the rings
// costs no syscall, a recvmmsg one, and a spinning ping-pong or a stream over the rings
// would otherwise pay it on every poll. At 32 the socket's reads were a quarter of each
// process's CPU in a busy 8 B ping-pong through the rings (perf, both sides), and one
// that came while the reply arrived delayed it by the syscall; at 256 an empty ring
// poll being some 60-80 ns, a datagram from a remote peer that comes while only the
// rings are busy waits some 20 µs at most before it is read (then the socket is read
// at every poll while it has traffic: udpHot).
//
// It is also how many polls the rings must stay empty before the socket is read at
// every poll again (ringQuiet): the throttle is for a socket beside busy rings, and
// applied to a device whose traffic is all remote (the device's ring to itself is
// always there, so rings are never absent) it held each busy-poll read of a remote
// peer's reply back by up to udpEvery polls: 8 B send_lat --busy-poll over a veth pair
// went from 3.0-3.7 µs one-way with GOVERBS_SHM=0 to 11.2-11.5 µs with GOVERBS_SHM=1
// (3 interleaved rounds, 2026-11-27), and a default-mode sender's spin after a batch of
// ACKs (engine spinRx) missed the next ACKs for most of its 50 µs.
const udpEvery = 256

// ReadBatch reads from the rings, then the UDP socket, and waits for either when both
// are empty.
func (c *sameHostConn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		rx := *c.rx.Load()
		selfOnly := !c.busy && len(rx) == 1 && rx[0] == c.self
		var n int
		var err error
		if selfOnly && !c.udpFirst && !c.lending.Load() {
			if c.graved.Load() {
				// A torn-down peer's pair left to the reader (finalize), which took it
				// off the list after it set graved: this read of the ring to itself
				// alone does not pass through pollLocked, which unmaps them, and a
				// pair's teardown is what leaves a read with that ring alone.
				c.reapLocked()
			}
			// The socket is read by readDirect's read below, which tries it before it
			// waits: a poll of it here first was a second recvmmsg per wait, a failed
			// one (strace -c of write_bw's sender over a veth pair: 2881 failed
			// recvmmsg for 20000 WRITEs with the wrapper, 1712 without).
			var pkts int
			n, pkts = c.readSelf(msgs)
			if pkts > 0 {
				c.rxPackets.Add(uint64(pkts))
			}
			c.noteRingRead(n > 0)
		} else {
			n, err = c.pollLocked(msgs, true)
		}
		if n > 0 || err != nil {
			return n, err
		}
		if c.closed.Load() {
			return 0, c.inner.readErr(net.ErrClosed)
		}
		if selfOnly {
			// No peer's ring, only the device's own: wait for the socket as the UDP
			// backend waits (its own watch), not in this Conn's epoll set, whose watch
			// on the socket costs every datagram a callback and the reader a
			// netpoller hand-off. A write to the own ring, and a peer's ring attaching,
			// interrupt that wait (publish, ringWake). direct is set before the ring's
			// sleeping flag, so that a writer that sees the flag sees direct too.
			c.direct.Store(true)
			if !c.sleep(rx) {
				c.direct.Store(false)
				continue
			}
			n, err := c.readDirect(msgs)
			c.direct.Store(false)
			awake(rx)
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		if !c.sleep(rx) {
			continue
		}
		if c.busy || c.driven {
			// (driven: the event loop's wait has the eventfd; a read that blocks anyway
			// waits in poll(2))
			_, err = c.waitPoll(-1)
		} else {
			// The socket is watched by this Conn's epoll set here; a readDirect before
			// a peer's ring attached armed its own watch again, which would cost every
			// datagram a second callback: take it off (a no-op when it is off).
			c.inner.Unwatch()
			err = c.waitNetpoller()
		}
		awake(rx)
		if errors.Is(err, ErrInterrupted) && !c.interrupted() {
			continue // a stale deadline, not this read's Interrupt
		}
		if err != nil {
			return 0, err
		}
	}
}

// interrupted is what a read ended with ErrInterrupted does: Interrupt sets the
// deadlines of both waits (this Conn's epoll set and the socket's own), so the one that
// did not end has its deadline cleared, and a pending ringWake is spent. It reports
// whether Interrupt asked for it (the read then returns ErrInterrupted); otherwise the
// wait was ended by a ring (ringWake) or a deadline left from an earlier Interrupt, and
// the read looks again.
func (c *sameHostConn) interrupted() bool {
	c.ep.SetReadDeadline(time.Time{})
	c.inner.er.setReadDeadline(time.Time{})
	c.ringWake.Store(false)
	return c.intr.Swap(false)
}

// readDirect is a blocking read of the UDP socket alone, in the UDP backend's own wait,
// while no peer's ring is attached; a write to the device's own ring or a peer's ring
// attaching interrupts it (ringWake), and 0, nil then tells ReadBatch to look again.
// c.rmu is held.
func (c *sameHostConn) readDirect(msgs []Message) (int, error) {
	if c.udpArmed && c.epollCtl(unix.EPOLL_CTL_DEL, nil) == nil {
		c.udpArmed = false
	}
	if c.ringWake.Swap(false) {
		return 0, nil // attached since the list was loaded
	}
	n, err := c.inner.ReadBatch(msgs)
	if errors.Is(err, ErrInterrupted) && !c.interrupted() {
		return 0, nil // a ring's write or attach (ringWake)
	}
	if err != nil {
		return 0, err
	}
	c.udpHot = n > 0
	return n, nil
}

// PollBatch reads what the rings and the socket hold now (Poller).
func (c *sameHostConn) PollBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	n, err := c.pollLocked(msgs, false)
	c.rmu.Unlock()
	return n, err
}

// pollLocked fills msgs from the rings and, when room is left, the UDP socket; c.rmu is
// held. always: read the socket every time (a blocking read about to sleep), not only
// every udpEvery empty polls.
func (c *sameHostConn) pollLocked(msgs []Message, always bool) (int, error) {
	if c.lending.Load() {
		c.ReleaseViews() // the reader did not: its next read does
	}
	if c.graved.Load() {
		c.reapLocked()
	}
	n := 0
	rx := *c.rx.Load()
	kick := c.udpKick.Load()
	if kick {
		c.udpKick.Store(false)
	}
	if c.udpFirst || len(rx) == 0 {
		k, err := c.pollUDP(msgs)
		if err != nil {
			return 0, err
		}
		n = k
		c.udpFirst = false
	}
	ringed := 0
	c.lentRead = false
	for _, p := range rx {
		if n == len(msgs) {
			break
		}
		var k, pkts int
		if p == c.self {
			k, pkts = c.readSelf(msgs[n:])
		} else {
			k, pkts = c.readRing(p, msgs[n:])
		}
		n += k
		ringed += k
		if pkts > 0 {
			c.rxPackets.Add(uint64(pkts))
		}
	}
	c.noteRingRead(ringed > 0)
	// The socket is read when it had traffic last time, when a blocking read found the
	// rings empty and is about to sleep, and otherwise every udpEvery polls, so that a
	// stream through the rings neither pays a syscall per poll nor starves the socket.
	c.idlePolls++
	if n == len(msgs) {
		// The rings filled the batch. A batch of several says they hold more: the
		// socket goes first at the next poll. A batch of one says nothing of the
		// kind, and a busy ping-pong or stream paid a recvmmsg at every other poll
		// (a third of the time of an 8 B WRITE stream between two busy-poll devices
		// through the rings): there the socket's turn comes every udpEvery polls, as
		// when the rings are quiet, or at once while it has traffic (udpHot).
		//
		// A default-mode Conn took the socket's turn after a batch of one too until
		// 2026-11-28: its readers are CQ polls, which read one datagram first
		// (engine drainLocked), and a spinning sender made 620 thousand recvmmsg
		// calls in a 3 s 8 B WRITE stream, rdmanet's request/response one after
		// every datagram it read. Without the turn (6 interleaved rounds each)
		// rdmanet's 64 B request/response in one process went from 0.86x to 0.66x Go
		// TCP's time and the 8 B rate stayed (0.997x), while send_lat -e went from
		// 0.79 to 0.96 us one-way: that send_lat's CQ poll after arming the channel
		// had caught the reply while in the recvmmsg, more than half the time,
		// instead of leaving it to the channel's waiter (engine Waiter.Serve), whose
		// wake costs more; a syscall's price is no wait to design on.
		//
		// Datagrams lent from a device of this process come a message each, up to a
		// GSO run's in a record (readLent), where their bytes came as one message: a
		// batch they filled says no more than a few runs would, and taking it for a
		// sign put a recvmmsg before every other read of a stream between two devices
		// of goverbs serve.
		if ringed > 0 && (len(msgs) > 1 && !c.lentRead || c.udpHot || c.idlePolls >= udpEvery) {
			c.udpFirst = true
		}
		if kick && !c.udpFirst {
			c.udpKick.Store(true) // not read this time: the next poll
		}
		return n, nil
	}
	if len(rx) > 0 && (c.udpHot || kick || always && ringed == 0 || c.idlePolls >= udpEvery || c.ringQuiet()) {
		k, err := c.pollUDP(msgs[n:])
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		n += k
	}
	return n, nil
}

// noteRingRead records whether a read took anything from a ring (FromRings, ringQuiet).
// c.rmu is held.
func (c *sameHostConn) noteRingRead(from bool) {
	if c.fromRings.Load() != from {
		c.fromRings.Store(from) // a store is a locked instruction; a spin's polls mostly change nothing
	}
	if from {
		c.ringIdle = 0
	} else if c.ringIdle < udpEvery {
		c.ringIdle++
	}
}

// ringQuiet reports whether the rings have been empty for udpEvery polls in a row: the
// socket is then the only source of traffic, and is read at every poll, as the UDP
// backend alone would read it (udpEvery). c.rmu is held.
func (c *sameHostConn) ringQuiet() bool { return c.ringIdle >= udpEvery }

func (c *sameHostConn) pollUDP(msgs []Message) (int, error) {
	c.udpPolls++
	c.idlePolls = 0
	k, err := c.inner.PollBatch(msgs)
	c.udpHot = k > 0 // udpConn's read clears each message's View (finishRecv)
	return k, err
}

// readRing copies up to len(msgs) messages out of p's ring, or lends them in place
// (lend), and returns how many, and how many datagrams they hold. c.rmu is held, and
// that is all: p's memory stays mapped while a reader holds rmu (finalize), and no one
// else uses p's consumer but ReleaseViews, which is the reader's too, and the waits
// (sleep, ringsEmpty), which touch only the shared words. p.rxMu, which a read took
// before, was two locked instructions per ring per poll, and a device polls two rings
// (its own and a peer's) at every CQ poll that finds nothing.
func (c *sameHostConn) readRing(p *shPair, msgs []Message) (n, pkts int) {
	if p.dead.Load() {
		return 0, 0
	}
	gro := c.inner.gro.Load()
	lent := false // a record of p's is lent: its room is given back by ReleaseViews
	for n < len(msgs) {
		rec, err := p.rx.Next()
		if err != nil {
			c.corrupt.Add(1)
			break // what was published is dropped; a later poll reads what comes after
		}
		if rec == nil {
			break
		}
		if len(rec) < ringHdr {
			c.corrupt.Add(1)
			p.rx.Release()
			continue
		}
		seg := int(binary.LittleEndian.Uint32(rec)) // read once: the peer may change it
		ecn, tc := ECN(rec[4]&0b11), rec[5]&^ECNMask
		data := rec[ringHdr:]
		if rec[6] == recLent {
			k, done := c.readLent(p, rec[:ringHdr], data, msgs[n:])
			n, pkts = n+k, pkts+k
			c.lentRead = true
			if !done {
				break // msgs is full: the next read goes on with this record
			}
			p.rx.Release()
			continue
		}
		m := &msgs[n]
		m.Lent = nil
		switch {
		case seg <= 0 || seg >= len(data):
			if len(data) <= len(m.Buf) && c.lend(p, data, &lent) {
				m.N, m.View = len(data), data
			} else {
				m.N, m.View = copy(m.Buf, data), nil // a datagram longer than the buffer is cut, as recvmmsg cuts it
			}
			m.SegSize = 0
			pkts++
		case gro && len(m.Buf) >= len(data):
			if c.lend(p, data, &lent) {
				m.N, m.View = len(data), data
			} else {
				m.N, m.View = copy(m.Buf, data), nil
			}
			m.SegSize = seg
			pkts += (len(data) + seg - 1) / seg
		default: // a run, to a reader without GRO: its datagrams one by one
			if (len(data)+seg-1)/seg > len(msgs)-n && n > 0 {
				if !lent {
					p.rx.Publish()
				}
				return n, pkts // the next call takes it whole
			}
			for off := 0; off < len(data) && n < len(msgs); off += seg {
				m = &msgs[n]
				m.N = copy(m.Buf, data[off:min(off+seg, len(data))])
				m.Addr, m.SegSize, m.Iov, m.View, m.Lent, m.ECN, m.TrafficClass, m.SameHost = p.peerSrc, 0, nil, nil, nil, ecn, tc, true
				n++
				pkts++
			}
			p.rx.Release()
			continue
		}
		m.Addr, m.Iov, m.ECN, m.TrafficClass, m.SameHost = p.peerSrc, nil, ecn, tc, true
		p.rx.Release()
		n++
	}
	if !lent {
		p.rx.Publish()
	}
	return n, pkts
}

// readSelf is readRing of the device's ring to itself, which it skips while nothing was
// published there since a read found it empty: the Conn is the ring's only producer
// (publish counts its publications in selfPub), and a device whose traffic is all
// remote has its ring to itself polled at every poll for nothing, a lock, a look at
// shared indices and an unlock that were the wrapper's largest share of a busy-poll
// one-way to a remote peer (perf of 8 B send_lat --busy-poll over a veth pair:
// PollBatch, readRing and pollLocked 1.8% of the sender's samples). c.rmu is held.
func (c *sameHostConn) readSelf(msgs []Message) (n, pkts int) {
	pub := c.selfPub.Load()
	if pub == c.selfRead {
		return 0, 0
	}
	n, pkts = c.readRing(c.self, msgs)
	if n == 0 && ringsEmpty([]*shPair{c.self}) {
		// Everything published up to pub is read.
		c.selfRead = pub
	}
	return n, pkts
}

// viewMin is the shortest record lent in place rather than copied: below it the copy
// costs less than the reader's private copy of the headers and the lease, and a small
// record (an ACK, a MAD) is read by code that looks at more than its headers.
const viewMin = 512

// lend reports whether data, a record of p's ring, is lent to the reader in place
// (LendViews): when the reader asked for views, the lease is free (viewMu: a teardown
// unmapping a ring, or Close, holds it) or already the reader's, and what is lent stays
// within an eighth of the ring, so that the peer keeps room to write while the reader
// works through the batch. *lent records that p now has a record out; p's tail is then
// published by ReleaseViews, not before. c.rmu is held.
func (c *sameHostConn) lend(p *shPair, data []byte, lent *bool) bool {
	if len(data) < viewMin || c.lentBytes+len(data) > c.ring/8 || !c.lease() {
		return false
	}
	if !*lent {
		*lent = true
		c.lent = append(c.lent, p)
	}
	c.lentBytes += len(data)
	return true
}

// lease takes the reader's lease on what this read lends (viewMu), unless it has it:
// false when the reader takes no views or a teardown or Close holds it. c.rmu is held.
func (c *sameHostConn) lease() bool {
	if !c.views.Load() {
		return false
	}
	if !c.lending.Load() {
		if !c.viewMu.TryLock() {
			return false
		}
		c.lending.Store(true)
	}
	return true
}

// FromRings reports whether the last read took anything from a ring (RingReader).
func (c *sameHostConn) FromRings() bool { return c.fromRings.Load() }

// LendViews lets reads lend ring records in place (ViewReader).
func (c *sameHostConn) LendViews() { c.views.Store(true) }

// ReleaseViews gives the ring room of what the last read lent back to its producers
// (ViewReader). The reader's, between its reads.
func (c *sameHostConn) ReleaseViews() {
	if !c.lending.Load() {
		return
	}
	for i, p := range c.lent {
		p.rxMu.Lock()
		if !p.dead.Load() { // never, while lent: finalize waits for viewMu
			p.rx.Publish()
		}
		p.rxMu.Unlock()
		c.lent[i] = nil
	}
	c.lent, c.lentBytes = c.lent[:0], 0
	c.unlendAll()
	c.lending.Store(false)
	c.viewMu.Unlock()
}

// sleep tells every ring's producer that the reader may wait, then looks once more: it
// reports false (and takes the word back) when a ring got something meanwhile.
func (c *sameHostConn) sleep(rx []*shPair) bool {
	for _, p := range rx {
		p.rxMu.Lock()
		if !p.dead.Load() {
			p.rx.Sleep()
		}
		p.rxMu.Unlock()
	}
	if !ringsEmpty(rx) {
		awake(rx)
		return false
	}
	return true
}

func awake(rx []*shPair) {
	for _, p := range rx {
		p.rxMu.Lock()
		if !p.dead.Load() {
			p.rx.Awake()
		}
		p.rxMu.Unlock()
	}
}

// ringsEmpty reports whether no ring of rx holds a datagram. The callers have read
// the rings until they were empty (their reads publish the tail) or are not the reader
// (WaitReadable, RingsSleep) and may run beside a read: Idle reads only shared words.
func ringsEmpty(rx []*shPair) bool {
	for _, p := range rx {
		p.rxMu.Lock()
		empty := p.dead.Load() || p.rx.Idle()
		p.rxMu.Unlock()
		if !empty {
			return false
		}
	}
	return true
}

// waitNetpoller parks in the netpoller until the UDP socket or a ring's eventfd is
// readable (default mode). An Interrupt ends it with ErrInterrupted.
func (c *sameHostConn) waitNetpoller() error {
	if !c.udpArmed {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.udpFD)}
		if err := c.epollCtl(unix.EPOLL_CTL_ADD, &ev); err == nil {
			c.udpArmed = true
		}
	}
	err := c.eprc.Read(c.waitFn)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.ep.SetReadDeadline(time.Time{})
			if c.intrErr == nil { // made once, as the UDP backend's (udpConn.interrupted)
				c.intrErr = fmt.Errorf("netio: read %v: %w", c.inner.LocalAddr(), ErrInterrupted)
			}
			return c.intrErr
		}
		return c.inner.readErr(net.ErrClosed)
	}
	return nil
}

// waitOnce is the netpoller's test of the epoll instance: ready when epoll_wait finds
// anything, and a ring's eventfd is drained on the way (level-triggered, it would stay
// ready).
func (c *sameHostConn) waitOnce(fd uintptr) bool {
	n, err := unix.EpollWait(int(fd), c.evs[:], 0)
	if err != nil || n <= 0 {
		return err != nil && err != unix.EINTR && err != unix.EAGAIN
	}
	for _, ev := range c.evs[:n] {
		if int(ev.Fd) == c.rxEv.FD() {
			c.rxEv.Drain()
		}
	}
	return true
}

func (c *sameHostConn) epollCtl(op int, ev *unix.EpollEvent) error {
	var err error
	if cerr := c.eprc.Control(func(fd uintptr) { err = unix.EpollCtl(int(fd), op, c.udpFD, ev) }); cerr != nil {
		return cerr
	}
	return err
}

// Unwatch takes the UDP socket out of the wait's epoll instance until the next blocking
// ReadBatch (Unwatcher): a program that spins on PollBatch wants no netpoller wake-up
// per datagram.
func (c *sameHostConn) Unwatch() {
	if c.busy {
		return
	}
	c.rmu.Lock()
	if c.udpArmed && !c.closed.Load() && c.epollCtl(unix.EPOLL_CTL_DEL, nil) == nil {
		c.udpArmed = false
	}
	c.inner.Unwatch() // the socket's own watch, which readDirect's waits arm
	c.rmu.Unlock()
}

// Interrupt ends a blocked ReadBatch, or the next one, with ErrInterrupted (Interrupter).
func (c *sameHostConn) Interrupt() {
	if !c.busy {
		// A ReadBatch waits in this Conn's epoll set or, with no ring attached, in the
		// socket's own wait (readDirect): both are told, and the one not waiting has
		// its deadline cleared when the other returns.
		c.intr.Store(true)
		c.ep.SetReadDeadline(longAgo)
		c.inner.Interrupt()
	}
}

func (c *sameHostConn) interruptible() bool { return !c.busy }

// WaitReadable waits until a ring or the UDP socket has a datagram, or the timeout
// passes (Poller), in poll(2) on the socket and the rings' eventfd.
func (c *sameHostConn) WaitReadable(timeout time.Duration) (bool, error) {
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		rx := *c.rx.Load()
		if !c.sleep(rx) {
			return true, nil
		}
		ready, err := c.waitPoll(timeout)
		awake(rx)
		if err != nil {
			return false, err
		}
		if ready || !ringsEmpty(rx) {
			return true, nil
		}
		// The eventfd woke us for nothing readable now (a pair installed, a wake-up
		// meant for a blocked ReadBatch): wait on for what is left of the timeout.
		if timeout >= 0 {
			if timeout = time.Until(deadline); timeout <= 0 {
				return false, nil
			}
		}
	}
}

// waitPoll waits in poll(2) for the UDP socket or the eventfd; it reports whether the
// socket is readable.
func (c *sameHostConn) waitPoll(timeout time.Duration) (bool, error) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed.Load() {
		return false, c.inner.readErr(net.ErrClosed)
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	for {
		fds := [2]unix.PollFd{{Fd: int32(c.udpFD), Events: unix.POLLIN}, {Fd: int32(c.rxEv.FD()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], ms)
		if c.closed.Load() {
			return false, c.inner.readErr(net.ErrClosed)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return false, c.inner.readErr(err)
		}
		if fds[1].Revents != 0 {
			c.rxEv.Drain()
		}
		return n > 0 && fds[0].Revents != 0, nil
	}
}
