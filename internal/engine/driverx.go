// An event loop of the caller's as the device's receive path (DriveRx): goverbs serve
// waits for its devices' sockets and its clients' doorbells in one epoll_wait, so that a
// client's post that goes to another device of the daemon is received, processed and
// completed in the iteration that posted it, with no goroutine woken for it.

package engine

import (
	"time"

	"github.com/goverbs/goverbs/netio"
)

// DriveRx hands the default mode's receive path to an event loop of the caller's: the
// receive goroutine (rxLoop) stops reading, the socket leaves the netpoller's watch,
// and from now on the caller waits for the returned descriptor to be readable (in an
// epoll set of its own, level-triggered) and calls PollDriven to read and process what
// it holds. It reports false, and changes nothing, on a device whose Conn cannot be
// waited for that way (netio.Watchable, netio.RingDriver), whose reads cannot be
// interrupted, or in busy-poll mode. Waiters (NewWaiter) no longer serve the socket; CQ
// polls that find it free still read it (PollRx). The descriptor is valid until the
// device closes.
//
// A device on the same-host rings has a second descriptor to wait for, RingFD, and its
// rings signal it only when told (RingsSleep): the caller polls such a device after
// every turn that did work, and waits for it only after RingsSleep said yes.
func (d *Device) DriveRx() (fd int, ok bool) {
	var w netio.Watchable
	if d.ringDrv == nil {
		if w, ok = netio.AsWatchable(d.conn); !ok {
			return -1, false
		}
	}
	if d.intr == nil || d.idlePoller == nil || d.poller != nil || d.closed.Load() {
		return -1, false
	}
	if !d.external.Swap(true) {
		// rxLoop lets the socket go after its read, which Interrupt ends, and looks at
		// external again under rxMu before any read of its own.
		for !d.rxMu.TryLock() {
			d.intr.Interrupt()
			time.Sleep(50 * time.Microsecond)
		}
		if d.unwatch != nil {
			d.unwatch.Unwatch()
		}
		d.flushAcks()
		d.rxMu.Unlock()
	}
	if d.ringDrv != nil {
		sock, _ := d.ringDrv.DriveFDs()
		return sock, true
	}
	return w.RecvFD(), true
}

// RingFD is the eventfd of a driven device's same-host rings (DriveRx), -1 for a device
// without them. It is readable only after RingsSleep, until RingsAwake.
func (d *Device) RingFD() int {
	if d.ringDrv == nil || !d.external.Load() {
		return -1
	}
	_, ev := d.ringDrv.DriveFDs()
	return ev
}

// RingsSleep tells the producers of a driven device's rings that the caller is about to
// wait for RingFD; false, with the word taken back, when a ring holds a datagram (poll
// instead). True for a device without rings.
func (d *Device) RingsSleep() bool { return d.ringDrv == nil || d.ringDrv.RingsSleep() }

// RingsAwake takes RingsSleep's word back after the wait, and drains RingFD when the
// caller saw it readable (drain).
func (d *Device) RingsAwake(drain bool) {
	if d.ringDrv != nil {
		d.ringDrv.RingsAwake(drain)
	}
}

// SocketReadable tells a driven device on the same-host rings that its socket is
// readable: the next PollDriven reads it, whatever the rings hold. A no-op for others,
// whose polls always read the socket.
func (d *Device) SocketReadable() {
	if d.ringDrv != nil {
		d.ringDrv.SocketReadable()
	}
}

// PollDriven reads and processes what the socket of a device driven by an event loop
// (DriveRx) holds now, sends the ACKs it earned and the posts that waited for a poll,
// and reports whether it read anything. It never blocks: it does nothing when another
// goroutine holds the socket (a CQ poll's PollRx), which then reads it.
func (d *Device) PollDriven() bool {
	if !d.rxMu.TryLock() {
		return false
	}
	// What readBlocking does for the receive goroutine: the CQ polls that drive the
	// device are counted from here, and the posts they deferred leave now.
	d.pollsSinceRead = 0
	if d.pollDriven.Load() {
		d.pollDriven.Store(false)
		d.doorbell.flush()
	}
	got := false
	slots := min(len(d.rxMsgs), busyBatch)
	for range drainBatches {
		n := d.readNow(d.idlePoller, slots)
		if n == 0 {
			break
		}
		got = true
		d.flushAcks()
		if n < slots {
			break
		}
	}
	if len(d.acks.owing) > 0 {
		d.flushAcks()
	}
	d.leaveRx()
	return got
}

// RxBytes is how many bytes of RoCEv2 packets the device has received (the rcvd_bytes
// counter): an event loop that drives several devices compares it across an interval to
// see which one carries a stream (goverbs serve hands such a device to a second thread).
func (d *Device) RxBytes() uint64 { return d.counters.RxBytes.Load() }

// PreferCopies asks the devices of this process that send to d through same-host rings
// to copy payloads into the rings (yes, the default), or to lend them for d's reader to
// copy once from their memory (no: where one thread does both ends' work, goverbs
// serve's loop; netio.LoanTaker; a no-op without rings).
func (d *Device) PreferCopies(yes bool) {
	if l, ok := netio.AsLoanTaker(d.conn); ok {
		l.PreferCopies(yes)
	}
}
