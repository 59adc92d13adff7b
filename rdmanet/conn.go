package rdmanet

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Work request IDs: the top two bits say what completed. The rest of a send's ID
// counts the data WRITEs its completion retires and their bytes: WRITEs are signaled
// selectively (signalEvery), and a send queue completes in order, so one completion
// stands for every unsignaled WRITE posted before it.
const (
	wrRecv      uint64 = 0
	wrCtrl      uint64 = 1 << 62
	wrData      uint64 = 2 << 62
	wrProbe     uint64 = 3 << 62
	wrKind      uint64 = 3 << 62
	wrMsgsShift        = 32
	wrBytesMask uint64 = 1<<32 - 1
	lingerT            = 10 * time.Second // how long a closed Conn waits for its last bytes' ACKs
	// closeWait is how much of lingerT Close itself waits: a live peer's transport
	// acknowledges within a round trip whatever its reader does, so only a peer that
	// is gone (or a network that drops everything) takes longer, and the rest of the
	// linger goes on after Close returns.
	closeWait = time.Second
	// probeInterval is how long a Write waits for credits, with nothing awaiting an
	// ACK, before it probes the peer (see probe).
	probeInterval = time.Second
)

// signalEvery is how many data WRITEs go per signaled one (rsockets signals every
// send; signaling is each side's own business, invisible on the wire): each
// completion costs the completion goroutine a wake-up, and in a request/response
// stream it is a wake-up per message on each side. A WRITE is also signaled once a
// quarter of the staging buffer has gone unsignaled, because the writer reuses
// staging space only as completions retire it (signaling only every 16th 64 KiB
// WRITE of a 1 MiB buffer drained all of it before each completion), and whenever
// it leaves the writer no room for the next (the writer will wait for its
// completion), so a writer never waits for a completion that was not asked for.
const signalEvery = 16

func sendID(kind uint64, msgs, bytes int) uint64 {
	return kind | uint64(msgs)<<wrMsgsShift | uint64(bytes)
}

var (
	// ErrPeerClosed is the error of a Write after the peer closed the connection.
	ErrPeerClosed  = errors.New("rdmanet: connection closed by peer")
	errWriteClosed = errors.New("rdmanet: write after CloseWrite")
	errProtocol    = errors.New("rdmanet: protocol violation by peer")
)

// Conn is a stream connection over an RC queue pair. It implements net.Conn, and
// CloseWrite as *net.TCPConn does.
type Conn struct {
	ep           *endpoint
	peer         connData
	order        binary.ByteOrder // the peer's, for what this side writes into its target SGL
	laddr, raddr *Addr
	// disconnect runs when the last message is acknowledged, before the endpoint is
	// released (the CM's DREQ); release after it (the shared device's reference).
	disconnect, release func()

	rmu, wmu sync.Mutex // one Read and one Write at a time, as net.Conn's callers may race
	rdl, wdl *deadline

	mu sync.Mutex
	// Receiving: the ring holds rxAvail unread bytes from stream position rxHead on
	// (ring offset rxHead mod its size); rxGranted is the stream position up to which
	// the peer was given buffers. rxSeq counts data messages received (16 bits, as
	// rsockets' sequence numbers), rxComp is the sequence up to which the peer may
	// send, and the next credit update is due when rxSeq reaches rxDue.
	rxHead, rxGranted uint64
	rxAvail           int
	rxSeq, rxComp     uint16
	rxDue             uint16
	remoteSGE         int  // the entry of the peer's target SGL the next update goes to
	eof               bool // the peer sent SHUTDOWN or DISCONNECT: after rxAvail, nothing more comes
	// Sending: stage bytes posted and completed (cumulative; a stage position is free
	// again once completed has passed it); the buffers the peer gave (target, the
	// current one tgt); txSeq data messages sent and txComp the peer's credit.
	sent, completed       uint64
	target                [sglEntries]sge
	tgt                   int
	tsglNext              int // the entry of the target SGL the peer's next update writes
	txSeq, txComp         uint16
	ctrls                 int // control messages in flight
	ctrlSeq               int // control messages sent: picks their SGE slot
	posted, retired       int // every send posted and completed
	unacked               int // data WRITEs posted and not completed
	quietMsgs, quietBytes int // data WRITEs posted unsignaled since the last signaled send
	finSent               bool
	peerClosed            bool
	err                   error // the QP failed or the peer broke the protocol
	closed                bool

	rxReady, txReady chan struct{} // wake the reader, the writer (capacity 1)
	// The CQ's pollers (poll.go): pollMu is held by whoever polls and handles
	// completions, and wcs is theirs; spinners counts Reads and Writes polling it
	// (spinFor) and spins the spins begun, while and after which the completion loop
	// parks until pollKick (poll); rxSpin and txSpin are whether the reader's and the
	// writer's spins pay (under rmu, wmu).
	pollMu   sync.Mutex
	wcs      []verbs.WC
	spinners atomic.Int32
	spins    atomic.Uint32
	// inProc: the peer's address is a device of this process, so the peer's goroutines
	// share its Ps with this side's spins (spinner).
	inProc     bool
	rxSpin     spinPolicy
	txSpin     spinPolicy
	blocked    atomic.Int32 // goroutines blocked on what completions bring (block)
	probeWaits atomic.Int32 // Write waits that lasted probeInterval (waitWritable)
	pollKick   chan struct{}
	probeTimer *time.Timer   // the waiting writer's (stopped when it does not wait)
	drained    chan struct{} // after Close: every send completed or failed
	flushed    chan struct{} // closed when the linger ends (every send completed, or lingerT)
	qpGone     chan struct{} // closed when the QP is destroyed, after flushed
	done       chan struct{} // closed by Close
	stopPoll   context.CancelFunc
	pollDone   chan struct{}
	tornDown   chan struct{} // the endpoint is released
}

// newConn starts the stream over an endpoint whose QP is in RTS, towards a peer that
// advertised peer.
func newConn(ep *endpoint, peer connData, laddr, raddr *Addr, disconnect, release func()) *Conn {
	c := &Conn{ep: ep, peer: peer, order: peer.order(), laddr: laddr, raddr: raddr,
		disconnect: disconnect, release: release,
		rdl: newDeadline(), wdl: newDeadline(),
		rxReady: make(chan struct{}, 1), txReady: make(chan struct{}, 1),
		pollKick: make(chan struct{}, 1), wcs: make([]verbs.WC, 64),
		drained: make(chan struct{}, 1), flushed: make(chan struct{}), qpGone: make(chan struct{}), done: make(chan struct{}),
		pollDone: make(chan struct{}), tornDown: make(chan struct{}), probeTimer: time.NewTimer(probeInterval)}
	c.probeTimer.Stop()
	c.inProc = raddr != nil && isLocal(raddr.AddrPort.Addr())
	// As rsockets starts: the peer's data buffer is the first target and its
	// credits the first window; the first half of this side's ring went in the
	// connection data, the second follows as the first SGL update (remoteSGE 1).
	c.target[0] = peer.dataBuf
	c.txComp = peer.credits
	c.rxGranted = uint64(len(ep.ring.Buf()) / 2)
	c.rxComp = uint16(ep.credits)
	c.rxDue = uint16(ep.credits / 2)
	c.remoteSGE = 1 % int(peer.targetSGL.length)
	c.tsglNext = 1 % sglEntries
	ctx, cancel := context.WithCancel(context.Background())
	c.stopPoll = cancel
	c.mu.Lock()
	c.giveCredit()
	c.mu.Unlock()
	go c.poll(ctx)
	return c
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *Conn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: Network, Source: c.laddr, Addr: c.raddr, Err: err}
}

// Read reads what the peer wrote, blocking until some bytes are there, the peer
// half-closes (io.EOF), the read deadline passes or the connection closes.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var waitStart time.Time
	for {
		c.mu.Lock()
		ready, err := c.readable()
		if err != nil || len(b) == 0 || ready {
			n := 0
			if err == nil && ready {
				n = c.copyOut(b)
			}
			c.mu.Unlock()
			if !waitStart.IsZero() {
				c.rxSpin.waited(time.Since(waitStart))
			}
			return n, c.opErr("read", err)
		}
		c.mu.Unlock()
		// The reader polls the CQ itself for a while before it parks, if its spins
		// have been paying off (spin.go): in a request/response the answer then
		// reaches the goroutine that wants it with no hand-off.
		if waitStart.IsZero() {
			waitStart = time.Now()
			if c.spinFor(&c.rxSpin, c.readReady) {
				continue
			}
		}
		c.waitReadable()
	}
}

// readReady says whether a Read would return now.
func (c *Conn) readReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ready, err := c.readable()
	return ready || err != nil
}

// writeReady says whether a Write could go on now.
func (c *Conn) writeReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeErr() != nil || c.txSpace(1) > 0
}

// readable says whether there are bytes to read, or else why there will be none
// (io.EOF after the peer's FIN or CLOSE). c.mu is held.
func (c *Conn) readable() (bool, error) {
	switch {
	case c.closed:
		return false, net.ErrClosed
	case isClosed(c.rdl.wait()):
		return false, os.ErrDeadlineExceeded
	case c.rxAvail > 0:
		return true, nil
	case c.eof:
		return false, io.EOF
	case c.err != nil:
		return false, c.err
	}
	return false, nil
}

// waitReadable waits for the peer's data, the read deadline or Close. The data comes
// through the completion loop, which a spinning Read may have parked: it is kicked.
func (c *Conn) waitReadable() {
	c.block()
	defer c.blocked.Add(-1)
	select {
	case <-c.rxReady:
	case <-c.rdl.wait():
	case <-c.done:
	}
}

// copyOut copies unread bytes from the ring into b and gives the peer the half of
// the ring they free, once a half is free. c.mu is held.
func (c *Conn) copyOut(b []byte) int {
	n := 0
	for n < len(b) && c.rxAvail > 0 {
		m := copy(b[n:], c.unread())
		n += m
		c.consumed(m)
	}
	c.giveCredit()
	return n
}

// unread is the contiguous run of unread bytes at the read position in the ring (the
// rest, if the run wraps, follows from the ring's start). c.mu is held.
func (c *Conn) unread() []byte {
	ring := c.ep.ring.Buf()
	off := int(c.rxHead % uint64(len(ring)))
	return ring[off:min(len(ring), off+c.rxAvail)]
}

// consumed moves the read position past n bytes the application has taken. c.mu is
// held.
func (c *Conn) consumed(n int) {
	c.rxHead += uint64(n)
	c.rxAvail -= n
}

// fail records the connection's first error and wakes every waiter. c.mu is held.
func (c *Conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	wake(c.rxReady)
	wake(c.txReady)
	wake(c.drained)
}

// failLocking is fail for a caller that does not hold c.mu.
func (c *Conn) failLocking(err error) {
	c.mu.Lock()
	c.fail(err)
	c.mu.Unlock()
}

// Write writes b to the stream. It returns once every byte is on its way (copied to
// the staging buffer and posted), or with the count written so far when the write
// deadline passes, the connection closes or fails.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for {
		c.mu.Lock()
		err := c.writeErr()
		if err != nil || n == len(b) {
			c.mu.Unlock()
			return n, c.opErr("write", err)
		}
		if chunk := c.txSpace(len(b) - n); chunk > 0 {
			if err := c.postData(b[n : n+chunk]); err != nil {
				c.mu.Unlock()
				return n, c.opErr("write", err)
			}
			n += chunk
			c.mu.Unlock()
			if chunk >= overlapChunk {
				c.pollOnce()
			}
			if n == len(b) {
				return n, nil // all of it posted: no second look under c.mu
			}
			continue
		}
		c.mu.Unlock()
		c.waitWritable()
	}
}

// overlapChunk is the size from which a Write polls the CQ once after posting a
// chunk (pollOnce): what came in while it copied (the peer's credits and buffers, the
// completions that free staging space) is taken then, and the device's socket read,
// instead of only once the writer has run out of room and waits. The completion loop
// did that on another thread when it spun after every completion; one poll per large
// chunk costs a small part of its copy, and a small Write (a request/response's) does
// not pay it.
const overlapChunk = 16 << 10

// pollOnce polls the CQ once unless another goroutine is polling it.
func (c *Conn) pollOnce() {
	if c.pollMu.TryLock() {
		c.pollCQ()
		c.pollMu.Unlock()
	}
}

// writeErr is why nothing more may be written now, if anything. c.mu is held.
func (c *Conn) writeErr() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.finSent:
		return errWriteClosed
	case c.peerClosed:
		return ErrPeerClosed
	case c.err != nil:
		return c.err
	case isClosed(c.wdl.wait()):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// waitWritable waits for the peer's credits or completions, the write deadline or
// Close, or probeInterval: a peer that is gone sends no credit, and once everything
// sent to it is acknowledged no retry can run out, so a wait that long probes it.
func (c *Conn) waitWritable() {
	start := time.Now()
	defer func() { c.txSpin.waited(time.Since(start)) }()
	if c.spinFor(&c.txSpin, c.writeReady) {
		return
	}
	c.block() // credits and completions come through the completion loop
	defer c.blocked.Add(-1)
	c.probeTimer.Reset(probeInterval)
	defer c.probeTimer.Stop()
	select {
	case <-c.txReady:
	case <-c.wdl.wait():
	case <-c.done:
	case <-c.probeTimer.C:
		c.probeWaits.Add(1)
		c.probe()
	}
}

// CloseWrite shuts down the sending side: the peer reads what was written, then
// io.EOF. Reading goes on.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return c.opErr("close", net.ErrClosed)
	case c.finSent:
		return nil
	case c.err != nil:
		return c.opErr("close", c.err)
	}
	c.finSent = true
	wake(c.txReady) // a blocked Write fails now
	if c.peerClosed {
		return nil
	}
	// rsockets' shutdown(SHUT_WR): a SHUTDOWN control message after the data.
	return c.opErr("close", c.postCtrl(msgImm(opCtrl, ctrlShutdown)))
}

// Close closes the connection: blocked calls return net.ErrClosed at once, the peer
// reads what was written and then io.EOF, and its writes fail. Close returns once the
// peer has acknowledged every byte and the close itself (at most closeWait, 1 s, for a
// peer that does not answer), so that a program may exit right after it; the queue
// pair and buffers are released in the background.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	c.closed = true
	close(c.done)
	if c.err == nil && !c.peerClosed {
		// rsockets' rclose: shutdown(SHUT_RDWR), a DISCONNECT after the data.
		c.postCtrl(msgImm(opCtrl, ctrlDisconnect))
	}
	c.mu.Unlock()
	c.kick() // the acknowledgements Close waits for come through the completion loop
	go c.teardown()
	// Nothing of this stack outlives the process (a kernel's TCP still sends the last
	// bytes and the FIN after exit), so Close waits for the peer's acknowledgements,
	// as rsockets' rclose does: without it, a program that writes, closes and exits
	// loses whatever the sender goroutine had not sent yet.
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-c.qpGone:
	case <-t.C:
	}
	return nil
}

// teardown waits until every send has completed (or failed, or lingerT passed), then
// stops the poller and releases the endpoint.
func (c *Conn) teardown() {
	defer close(c.tornDown)
	t := time.NewTimer(lingerT)
	defer t.Stop()
linger:
	for !c.quiet() {
		select {
		case <-c.drained:
		case <-t.C:
			break linger
		}
	}
	close(c.flushed)
	c.stopPoll()
	<-c.pollDone
	// The QP goes first, as rsockets' rclose destroys it before its rdma_cm id: the
	// device then sends whatever ACK it still owes the peer (a software device defers
	// ACKs to batch them), and Close, which waits for this, may be followed by exit.
	// A peer's last message (its DISCONNECT) left unacknowledged would have it
	// retransmitting to nobody, and rsockets' rclose waits for that ACK.
	c.ep.closeQP()
	close(c.qpGone)
	if c.disconnect != nil {
		c.disconnect()
	}
	c.ep.close()
	if c.release != nil {
		c.release()
	}
}

// quiet says whether every send has completed, or the QP failed and none will. The
// data WRITEs still unsignaled are left out: when Close sent CLOSE, its completion
// retires them (there are none left out); when it did not, the peer had closed and
// reads no more, and no completion would ever stand for them.
func (c *Conn) quiet() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posted-c.quietMsgs == c.retired || c.err != nil
}

// LocalAddr returns this side's address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the time after which Read fails with os.ErrDeadlineExceeded
// (a net.Error whose Timeout is true); the zero time means never.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.isClosed() {
		return c.opErr("set", net.ErrClosed)
	}
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the time after which Write fails with os.ErrDeadlineExceeded;
// the zero time means never.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.isClosed() {
		return c.opErr("set", net.ErrClosed)
	}
	c.wdl.set(t)
	return nil
}

func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
