// The receive drive: what reads the device's socket, and when. In the default mode one
// goroutine (rxLoop) sleeps until a batch arrives and processes it to completion; in
// busy-poll mode the application's CQ polls read the socket (PollRx) and a background
// goroutine (busyLoop) serves what nobody polls for. What happens to each packet
// (parse, ICRC, dispatch) is input.go's; what is sent later rather than now is
// sender.go's and doorbell.go's.

package engine

import (
	"runtime"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// rxBufSize is a receive buffer: a whole GRO run when the socket coalesces (the size the
// Conn asks for), otherwise the largest RoCEv2 packet with room to spare (a longer
// datagram is truncated and then fails its length or ICRC check, which is what it
// deserves).
func rxBufSize(c netio.Caps) int {
	if c.GRO {
		return max(c.GROBufSize, 2*txBufSize)
	}
	return 2 * txBufSize
}

// newRxMsgs allocates the receive batch.
func newRxMsgs(caps netio.Caps) []netio.Message {
	msgs := make([]netio.Message, min(max(caps.BatchSize, 1), 64))
	size := rxBufSize(caps)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
}

// rxLoop is the device's receive path in the default mode: it sleeps in the netpoller
// until a batch arrives and processes each packet to completion (responder or completer)
// before reading the next batch, then sends the ACKs the batch earned, one per QP.
//
// When goroutines wait for completions on the device's channels and its Conn can be
// interrupted, they read the socket themselves (Serve, waiter.go) and this goroutine steps
// aside: after each batch it looks whether a waiter has come since it last looked, and if
// one has it lets the socket go and sleeps until waiters have stopped coming for a
// leadIdle period; then it sends what they left owing and reads again.
func (d *Device) rxLoop() {
	defer close(d.rxDone)
	if d.poller != nil {
		d.busyLoop()
		return
	}
	held := d.intr == nil // without waiters that read, this goroutine is the only reader
	if held {
		d.rxMu.Lock()
	}
	seen, polled := d.leads.Load(), d.polls.Load()
	for {
		if d.external.Load() && !held {
			<-d.rxStop // an event loop reads the socket (DriveRx)
			return
		}
		if !held {
			if d.closed.Load() {
				return
			}
			if !d.takeRx(&seen, &polled) {
				continue
			}
			if d.external.Load() {
				d.leaveRx()
				continue
			}
			held = true
		}
		slept := nanotime()
		n, err := d.readBlocking()
		switch {
		case err == nil:
			dense := d.idlePoller != nil && !d.noRxSpin.Load() && nanotime()-slept < int64(denseGap) && d.spinnable(n)
			d.processRx(n)
			if dense {
				d.spinRx(seen, polled)
			}
		case isClosed(err) || d.closed.Load():
			d.rxMu.Unlock()
			return
		case !isInterrupted(err):
			d.rxError(err)
		}
		if d.intr != nil && (d.external.Load() || d.leads.Load() != seen || d.polls.Load()-polled >= tightPolls) {
			d.leaveRx() // a waiter wants the socket (Serve), or a poller spins (PollRx)
			held = false
		} else {
			polled = d.polls.Load()
		}
	}
}

// readBlocking reads a batch, waiting in the netpoller for one: the receive goroutine's
// read, or a serving waiter's (waiter.go). d.rxMu is held. The polls that may take the
// socket out of the netpoller's watch are counted from here (drainLocked).
func (d *Device) readBlocking() (int, error) {
	d.beginRead()
	n, err := d.conn.ReadBatch(d.rxMsgs)
	raceAcquireWire()
	return n, err
}

// beginRead starts a read of the receive path's own (readBlocking, or a serving
// waiter's ring spin): polls are counted from here, and what the poller's last posts
// left waiting for its poll goes out now.
func (d *Device) beginRead() {
	d.pollsSinceRead = 0
	if d.pollDriven.Load() {
		d.pollDriven.Store(false)
		d.doorbell.flush()
	}
}

// fromRings reports whether the last read came from same-host rings
// (netio.RingReader); false on a device without them.
func (d *Device) fromRings() bool {
	return d.rings != nil && d.rings.FromRings()
}

// spinRx keeps reading the socket without blocking for up to rxSpin after the last
// batch, yielding between reads, as NAPI polls a busy NIC instead of taking an
// interrupt per packet. rxLoop spins only when traffic is dense and small: its last
// sleep in the socket's read was shorter than denseGap, and the batch that woke it was
// of small packets (smallBatch). A stream that comes in bursts (a sender whose window
// of small WRITEs empties and refills faster than an idle vCPU wakes up) then finds
// this goroutine awake, not asleep: the wake-up per window was what bound the
// small-message rate (docs/DESIGN.md, "Default mode: a program that polls reads the
// socket"). Sporadic traffic costs no spin: a sleep longer than denseGap ends it. It
// stops at once for a waiter or a spinning poller, which then read the socket
// themselves.
//
// After a batch from the same-host rings, whose poll makes no system call, bulk batches
// spin too (spinnable): there no kernel work of the sender's needs the core, and each
// sleep cost the sender an eventfd write and this side a netpoller wake-up per window
// (RC WRITE 64 KiB through the rings went from 2788-4539 to 4859-7173 MiB/s, issue 28).
func (d *Device) spinRx(seen, polled uint32) {
	if d.unwatch != nil {
		// While this goroutine polls, the netpoller need not watch the socket: each
		// datagram would wake a runtime thread for nothing (netio.Unwatcher). The next
		// ReadBatch watches it again.
		d.unwatch.Unwatch()
	}
	start, budget := nanotime(), d.spinBudget()
	for {
		if d.closed.Load() || d.leads.Load() != seen || d.polls.Load()-polled >= tightPolls {
			return
		}
		n, err := d.idlePoller.PollBatch(d.rxMsgs)
		raceAcquireWire()
		if err != nil {
			return
		}
		if n > 0 {
			small, b := d.spinnable(n), d.spinBudget()
			d.processRx(n)
			if !small {
				return // a bulk stream: its batches pay for the wake-up
			}
			start, budget = nanotime(), b
			continue
		}
		if nanotime()-start > budget {
			return
		}
		runtime.Gosched()
	}
}

// spinBudget is how long spinRx polls on after the batch just read: rxSpinRings after
// one from the same-host rings, rxSpin otherwise.
func (d *Device) spinBudget() int64 {
	if d.fromRings() {
		return int64(rxSpinRings)
	}
	return int64(rxSpin)
}

// spinnable reports whether the first n messages of the receive batch are traffic that
// spinRx spins for: small packets (smallBatch), or anything that came through the
// same-host rings (netio.RingReader), where a poll costs no system call. Bulk traffic
// from a socket, a remote peer's through a same-host Conn included, does not spin.
func (d *Device) spinnable(n int) bool {
	return d.fromRings() || d.smallBatch(n)
}

// smallBatch reports whether the first n messages of the receive batch are small
// packets, below smallPacket bytes on average: a small-message stream, which spinRx
// keeps up with. A bulk stream's packets (MTU-sized) come in batches that pay for the
// receive goroutine's wake-up many times over, and spinning between them only takes the
// core the sender needs on a small machine (DESIGN.md has the measurement).
func (d *Device) smallBatch(n int) bool {
	bytes, pkts := 0, 0
	for i := range d.rxMsgs[:n] {
		bytes += d.rxMsgs[i].N
		pkts += d.rxMsgs[i].NumSegments()
	}
	return bytes < smallPacket*pkts
}

// rxSpin is how long rxLoop reads on after its last batch when traffic is dense, and
// denseGap how short its last sleep must have been for that (spinRx); smallPacket is
// what a batch's packets must stay under on average (smallBatch).
//
// rxSpinRings is spinRx's budget after a batch from the same-host rings. A receiver
// whose spin ran out while its sender was held up slept, and was woken by the sender's
// eventfd write some 40 µs later on the VM (a halted vCPU's wake-up), with the sender's
// window waiting on its ACK meanwhile (DESIGN.md, "The per-message cost budget"); 200
// µs covers most such gaps. Over UDP the spin takes the core the sender's kernel work
// needs, and stays at rxSpin.
const (
	rxSpin      = 50 * time.Microsecond
	rxSpinRings = 200 * time.Microsecond
	denseGap    = 4 * rxSpin
	smallPacket = 512
)

// takeRx makes the receive goroutine the socket's reader again once no waiter has come
// since *seen (a count of Serve calls and batches) for a leadIdle period and no CQ poll
// since *polled for a pollIdle period, and reports whether it did. While waiters or
// polls come it sleeps, offering the socket to a waiter that may be blocked on its
// channel (Waiter.Turn); while one holds the socket it waits for it to let go.
func (d *Device) takeRx(seen, polled *uint32) bool {
	if n := d.leads.Load(); n != *seen {
		*seen = n
		select {
		case d.rxFree <- struct{}{}:
		default:
		}
		time.Sleep(leadIdle)
		return false
	}
	if n := d.polls.Load(); n-*polled >= uint32(pollIdle/drivingGap) {
		*polled = n
		select {
		case d.rxFree <- struct{}{}:
		default:
		}
		time.Sleep(pollIdle)
		return false
	}
	*polled = d.polls.Load()
	if !d.rxMu.TryLock() {
		select {
		case <-d.rxFree:
		case <-d.rxStop:
		}
		return false
	}
	d.flushAcks() // what the waiters left owing
	return true
}

// NoReceiveSpin keeps the default mode's receive goroutine from spinning after a batch
// (spinRx), and a busy-poll device's background goroutine too (busyDrain), for a device
// whose completions other processes consume: goverbs serve's,
// whose clients spin on their CQs in shared memory. The spin pays when the program that
// wants the next packet is in this process and can be told at once; for the daemon it
// is a third spinner beside two clients, and on a small machine the daemon's own
// wake-ups then wait for a core (attached 8 B send_lat 133 µs with it, 26-34 µs without,
// on 2 cores: the daemon's goroutines spent their time runnable, not running).
func (d *Device) NoReceiveSpin() { d.noRxSpin.Store(true) }

// tightPolls and drivingGap tell a program that drives the device with its CQ polls,
// whose polls should read the socket (PollRx), from one that polls now and then and
// sleeps in between. The receive goroutine steps aside once tightPolls polls have come
// during one of its reads (rxLoop, spinRx), and stays aside while they come at least
// every drivingGap on average (takeRx); otherwise it keeps reading, and a sleepy
// poller's polls find the socket held and do nothing, as before polls read it: stepping
// aside for a poller that sleeps between polls (goverbs' send_bw receiver does, and Go
// rounds its short sleeps up to about a millisecond) would leave a stream to one read
// per sleep.
//
// drivingGap is wide enough that a WRITE sender that polls between its own sends (a
// large WRITE's work between two polls, every request completed as perftest does) is
// not taken for a sleeper: were it, the receive goroutine would take the socket back
// every few milliseconds and the two threads would split the work, ACK-driven sends on
// one and posts and polls on the other, which on two cores takes the one the peer
// needs. DESIGN.md has the measurements behind both.
const (
	tightPolls = 16
	drivingGap = 50 * time.Microsecond
)

// busyLoop serves a busy-poll device: the application's CQ polls read the socket
// themselves (PollRx); this goroutine only parks until traffic arrives that nobody is
// polling for, such as one-sided WRITEs to a passive target.
func (d *Device) busyLoop() {
	seen := d.polls.Load()
	for {
		if d.closed.Load() {
			return
		}
		// While the application polls, stay out of its way: a goroutine woken by every
		// packet takes the core from the thread that is spinning for that packet (on a
		// small machine, one core per process). Look again a while later.
		if n := d.polls.Load(); n != seen {
			seen = n
			time.Sleep(busyIdle)
			continue
		}
		// No poll for a while: the ACKs the pollers left owing are this goroutine's.
		if d.rxMu.TryLock() {
			d.flushAcks()
			d.rxMu.Unlock()
		}
		d.busyWaits.Add(1)
		ready, err := d.poller.WaitReadable(busyIdle)
		if err != nil {
			if isClosed(err) || d.closed.Load() {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if !ready || d.polls.Load() != seen {
			continue // nothing came, or a poller is back and takes it
		}
		if !d.rxMu.TryLock() {
			// A poller holds the socket: it reads what came, and this goroutine stays
			// aside as it does while polls come. It used to yield and look again at
			// once, which spun: on a small machine a poller's thread is often
			// descheduled mid-poll, by this very goroutine's thread among others, and
			// its polls stop counting while it waits for a core; this goroutine then
			// took that core spinning through WaitReadable and set the rings' sleep
			// flags each time, so that the peer's sends paid an eventfd write. Two
			// busy-poll send_lat processes through the rings went round this loop
			// half a million times a second each for some thousand sleeps.
			time.Sleep(busyIdle)
			seen = d.polls.Load()
			continue
		}
		d.busyDrain(seen)
	}
}

// busyRead is the background goroutine's read: a batch of up to busyBatch, its ACKs sent
// at once, since there is no application thread here to take them along. It reports
// how many datagrams it read and whether they are traffic to spin for: small packets
// (smallBatch; the batch is d.rxMsgs, d.rxMu's like the rest), never on a device whose
// completions other processes consume (NoReceiveSpin: goverbs serve's). Unlike the
// default mode's spinRx, bulk batches from the rings do not spin: a batch of 8 full
// packets pays for its wake-up, and spinning after them put Debian's ib_write_bw 64 KiB
// on the C drop-in (busy-poll by default) into its slow mode (about 2.7 against 5-8
// GB/s) in 6 rounds of 10 against 1 without (0.71x). d.rxMu is held.
func (d *Device) busyRead() (n int, spin bool) {
	if len(d.acks.owing) > 0 {
		d.sendDueAcks()
	}
	n = d.readNow(d.poller, min(len(d.rxMsgs), busyBatch))
	d.flushAcks()
	return n, n > 0 && !d.noRxSpin.Load() && d.smallBatch(n)
}

// busyDrain reads a batch, and keeps reading while traffic keeps coming and no poller
// comes back: for spinBudget after the last batch, and only for small packets
// (busyRead). Traffic nobody polls for (a passive target's WRITE stream) would
// otherwise cost a sleep and a wake-up per batch of busyBatch, and the sender an eventfd
// write for each (an 8 B WRITE stream to a busy-poll target through the rings ran at 0.9
// M/s, to a default-mode one at 2.3). d.rxMu is held on entry and released on return.
func (d *Device) busyDrain(seen uint32) {
	n, spin := d.busyRead()
	d.rxMu.Unlock()
	if n == 0 || !spin {
		return
	}
	start, budget := nanotime(), d.spinBudget()
	for !d.closed.Load() && d.polls.Load() == seen && d.rxMu.TryLock() {
		n, spin = d.busyRead()
		d.rxMu.Unlock()
		switch {
		case n > 0 && !spin:
			return // a bulk stream: its batches pay for the wake-up
		case n > 0:
			start, budget = nanotime(), d.spinBudget()
		case nanotime()-start > budget:
			return
		default:
			runtime.Gosched()
		}
	}
}

// busyBatch is how many datagrams (GRO runs, when the socket coalesces) the background
// goroutine's poll reads at most; an application's poll (PollRx) reads one. recvmmsg
// returns only after it has failed to read one datagram more than it found, a second
// pass through the socket layer, and an application that spins for a completion mostly
// finds one datagram, so in a busy ping-pong 8 slots instead of 1 cost measurable
// latency (DESIGN.md, "Busy-poll mode"). Traffic nobody polls for (a passive
// WRITE target) is the background goroutine's, and a stream: it reads in batches.
// (Switching an application's poll to 8 slots while datagrams kept coming lost the
// latency gain, the peer's ACK arriving just before its next request.)
const busyBatch = 8

// leadIdle is how long the default mode's receive goroutine leaves the socket to the
// goroutines waiting for completions once it has seen one come (takeRx), so it bounds
// how long an ACK a waiter left owing, or traffic that arrives while nobody waits,
// waits for it: between one and two periods. Its sleeps are the only timer of an idle
// ping-pong, and each firing can hand the waiting goroutine to another thread (the one
// that watched the timer blocks in the netpoller; the waiter's thread then cannot):
// a short period spread a channel-waiting server over three threads and lost what the
// leader/follower receive gains; a long one delays owed ACKs (DESIGN.md, "Default mode:
// the waiter reads the socket").
const leadIdle = 10 * time.Millisecond

// pollIdle is how long the default mode's receive goroutine leaves the socket to a
// program that spins on its CQ (PollRx, tightPolls) before it looks again, so it bounds
// how long traffic that arrives after the polls stop, and ACKs they left owing, wait:
// between one and two periods. Polls that find the socket held by a blocked waiter or by this goroutine
// do nothing, so a program that mixes polls with channel waits loses nothing.
const pollIdle = time.Millisecond

// busyIdle is how long the background goroutine leaves a busy-poll device to its
// pollers once it has seen them poll.
const busyIdle = time.Millisecond

// PollRx reads and processes what the socket holds now, if no one else is doing so.
// It reports whether it ran. CQ polls that find their CQ empty call it, and so does
// Device.Progress.
//
// In busy-poll mode that is how the device is driven. In the default mode the device
// has readers of its own (rxLoop, or a waiter's Serve), and a poll reads only while
// neither holds the socket: a program that polls in a loop, as perftest's tools and
// DPDK-style programs do, then finds its packets itself, on its own thread, instead of
// waiting for the netpoller to wake another thread that hands them over (on a VM,
// waking an idle vCPU is most of a one-way trip). rxLoop steps aside while a program
// spins (tightPolls, drivingGap) and takes the socket back when it stops; a poll never
// blocks.
func (d *Device) PollRx() bool {
	d.doorbell.flush() // the stream's posts go before the socket is read
	p := d.poller
	if p == nil {
		if p = d.idlePoller; p == nil {
			return false
		}
	}
	d.polls.Add(1)
	if !d.rxMu.TryLock() {
		return false
	}
	if d.poller != nil {
		d.pollLocked(p, 1)
		d.rxMu.Unlock()
		return true
	}
	d.drainLocked(p)
	d.leaveRx() // a waiter that found the socket held may be waiting for it (Turn)
	return true
}

// Progress drives the receive path once (driver.Device): PollRx. It reports true on a
// busy-poll device, which is driven that way, even when another poller held the socket.
func (d *Device) Progress() bool {
	ran := d.PollRx()
	return d.BusyPoll() || ran
}

// drainLocked is a default-mode poll's read (d.rxMu is held): one datagram, and after a
// GRO run (a stream's) batches of up to busyBatch datagrams while they come full, at
// most drainBatches of them, so that a stream does not wait a poll per datagram when
// the program pauses between polls. A stream's ACKs leave at once; a single datagram's
// ACK waits, as a busy poller's does, for the reply that carries it (sendDueAcks). At
// the tightPolls-th poll since the last blocking read the socket leaves the
// netpoller's watch (Unwatch).
func (d *Device) drainLocked(p netio.Poller) {
	if len(d.acks.owing) > 0 {
		d.sendDueAcks()
	}
	if d.pollsSinceRead++; d.pollsSinceRead == tightPolls {
		// A spinning program: no runtime thread woken per datagram, and its streams
		// wait for its polls.
		if d.unwatch != nil {
			d.unwatch.Unwatch()
		}
		d.pollDriven.Store(true)
	}
	// One datagram first, as a busy poller reads: a ping-pong finds one, and a wider
	// recvmmsg costs a second pass through the socket layer before the completion
	// (busyBatch). A GRO run is a stream's: then read on in batches.
	if d.readNow(p, 1) == 0 || d.rxMsgs[0].SegSize == 0 {
		return
	}
	d.flushAcks()
	slots := min(len(d.rxMsgs), busyBatch)
	for range drainBatches {
		n := d.readNow(p, slots)
		if n == 0 {
			return
		}
		if n > 1 || d.rxMsgs[0].SegSize > 0 {
			d.flushAcks()
		}
		if n < slots {
			return
		}
	}
}

// drainBatches bounds one default-mode poll's reads (drainLocked): 64 datagrams, each
// up to a 64 KiB GRO run.
const drainBatches = 8

// pollLocked reads and processes one batch of up to slots datagrams from p; d.rxMu is
// held. The ACKs it earns wait (sendDueAcks).
func (d *Device) pollLocked(p netio.Poller, slots int) {
	if len(d.acks.owing) > 0 {
		d.sendDueAcks()
	}
	d.readNow(p, slots)
}

// readNow reads what p holds now, up to slots datagrams, runs it through the device and
// returns how many it read (a read error counts as none: the blocking read reports it);
// d.rxMu is held.
func (d *Device) readNow(p netio.Poller, slots int) int {
	n, err := p.PollBatch(d.rxMsgs[:slots])
	raceAcquireWire()
	if err != nil || n == 0 {
		return 0
	}
	d.inputBatch(n)
	return n
}

// countRx adds msgs' datagrams to the device's receive counters.
func (d *Device) countRx(msgs []netio.Message) {
	var pkts, bytes uint64
	for i := range msgs {
		pkts += uint64(msgs[i].NumSegments())
		bytes += uint64(msgs[i].N + len(msgs[i].Lent))
	}
	d.counters.RxPackets.Add(pkts)
	d.counters.RxBytes.Add(bytes)
}

// processRx runs the first n messages of the receive batch through the device and sends
// the ACKs they earned.
//
// When the batch woke a completion channel's waiter and ACKs are owed, the receive
// goroutine yields before sending them. The waiter was made runnable on this P (a channel
// hand-off puts it next in line), so it runs at once; a ping-pong replies, and the reply
// takes the owed ACK along in its own sendmmsg (ackAlong). The peer then gets one wake-up
// per turn instead of two (ACK, then reply), and this side saves a send. If the waiter
// posts nothing, the ACKs leave when this goroutine runs again: after the waiter blocks,
// or sooner on another P.
func (d *Device) processRx(n int) {
	d.woke.Store(false)
	d.inputBatch(n)
	if len(d.acks.owing) > 0 && d.woke.Load() {
		runtime.Gosched()
	}
	d.flushAcks()
}

// inputBatch runs the first n messages of the receive batch through the device.
//
// The batch's datagrams are counted first, with one Add per counter, not two per
// datagram (each Add is a locked instruction), and before any of them takes effect, as
// when each was counted on arrival.
func (d *Device) inputBatch(n int) {
	d.countRx(d.rxMsgs[:n])
	lent := false
	for i := range d.rxMsgs[:n] {
		m := &d.rxMsgs[i]
		b := m.Buf[:m.N]
		d.rxECN = m.ECN // a GRO run has one codepoint: the kernel coalesces only equal TOS
		d.rxIntact = m.SameHost
		if m.Lent != nil {
			// Its payload lent from a sender's memory in this process (netio.Message.Lent).
			lent = true
			d.inputLent(m.Buf[:m.N], m.Lent, m.Addr)
		} else if m.View != nil {
			// Lent in place from a same-host peer's ring (netio.ViewReader), m.Buf free.
			lent = true
			b = m.View[:m.N]
			if m.SegSize > 0 {
				for seg := 0; len(b) > 0; seg++ {
					k := min(m.SegSize, len(b))
					d.inputView(b[:k], m.Buf, m.Addr, seg)
					b = b[k:]
				}
			} else {
				d.inputView(b, m.Buf, m.Addr, 0)
			}
		} else if m.SegSize > 0 {
			d.rxRun = true
			for seg := 0; len(b) > 0; seg++ {
				k := min(m.SegSize, len(b))
				d.input(b[:k], m.Addr, seg)
				b = b[k:]
			}
			d.rxRun = false
			d.releaseRx()
		} else {
			d.input(b, m.Addr, 0)
		}
		// A GRO run is a stream's burst (up to 64 KiB): in the default mode the ACKs it
		// earned leave before the rest of the batch is copied, so that the requester's
		// window (QP.window) reopens while this side works. A busy poller keeps its
		// deferral (sendDueAcks).
		if d.poller == nil && i < n-1 && len(d.acks.owing) > 0 && m.SegSize > 0 {
			d.flushAcks()
		}
	}
	if lent {
		d.views.ReleaseViews() // the ring room goes back to the peer before the ACKs leave
	}
	if len(d.srRuns) > 0 {
		d.runSRRequesters()
	}
}
