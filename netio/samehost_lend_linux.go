//go:build linux

// The same-host shortcut between two devices of one process (goverbs serve's devices,
// or a program's own): a datagram's payload crosses the ring as a reference to the
// sender's registered memory (Message.Loans) rather than as bytes, and the receiver
// copies it once, from the sender's memory straight into the target's. Over the ring
// as bytes it was copied twice, into the ring and out of it: under iperf3 over
// librspreload those two copies were 45% of the daemon's CPU, half each (perf, 2026-11-28).

package netio

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/shm"
)

// recLent, in a ring record's header byte 6, marks a record of lent datagrams: byte 7
// says how many (up to maxLentRecord), and each is an entry of lentEntryHdr bytes (its
// headers' length, its pad and ICRC's length, 2 reserved, its loan's sequence number)
// followed by its headers and then its pad and ICRC; its payload is the next loan of the
// pair's queue. A GSO run's lent datagrams share a record, as its bytes would: a read
// takes the whole run, so that a stream's reads and their ACKs stay as few as over bytes.
const (
	recLent       = 1
	lentEntryHdr  = 8
	maxLentRecord = MaxGSOSegments
)

// tokenOff is where a region's header holds the token that names its loan queues in
// this process (localRegions), written by the side that creates the region.
const tokenOff = 16

// loanQueue carries one ring's loans in the order their records were written: the
// writer pushes under the pair's txMu, the reader pops under its Conn's rmu. A circular
// buffer that doubles when full (never beyond what the ring holds in lent records).
type loanQueue struct {
	// loans: the reader asks for loans, not bytes (PreferCopies(false)); the writer's
	// look. Its zero value, bytes, is every Conn's start.
	loans      atomic.Bool
	mu         sync.Mutex
	q          []queuedLoan // len a power of two
	head, tail uint32       // pop at head, push at tail; tail-head loans queued
}

type queuedLoan struct {
	from Lender
	off  int
	n    int
	seq  uint32
}

// pushLocked queues a loan and returns its sequence number, which its record carries.
// q.mu is held: once per record of lent datagrams, not per datagram.
func (q *loanQueue) pushLocked(from Lender, off, n int) uint32 {
	if int(q.tail-q.head) == len(q.q) {
		old := q.q
		q.q = make([]queuedLoan, max(2*len(old), 64))
		for i := q.head; i != q.tail; i++ {
			q.q[i&uint32(len(q.q)-1)] = old[i&uint32(len(old)-1)]
		}
	}
	s := q.tail
	q.q[s&uint32(len(q.q)-1)] = queuedLoan{from, off, n, s}
	q.tail++
	return s
}

// popLocked takes the oldest loan; false when there is none. q.mu is held.
func (q *loanQueue) popLocked() (queuedLoan, bool) {
	if q.head == q.tail {
		return queuedLoan{}, false
	}
	e := &q.q[q.head&uint32(len(q.q)-1)]
	l := *e
	*e = queuedLoan{} // no reference to the sender's memory outlives the read
	q.head++
	return l, true
}

// inproc is the two loan queues of a region both of whose ends are in this process,
// queue i for ring i (0: initiator to acceptor).
type inproc struct {
	q [2]loanQueue
	// accepted: the acceptor found the queues and reads ring 0's loans; set before its
	// reply, so that the dialer lends only to a reader that takes loans.
	accepted atomic.Bool
}

// localRegions names the inproc of every region this process created for a pair
// (dial), by the token in the region's header, until that pair is finalized: an
// acceptor in the same process finds the queues its dialer writes there.
var localRegions sync.Map // uint64 → *inproc

// newLocalToken registers fresh loan queues for a region being created and writes
// their token into its header.
func newLocalToken(mem []byte) (uint64, *inproc) {
	ip := &inproc{}
	for {
		t := rand.Uint64()
		if _, dup := localRegions.LoadOrStore(t, ip); t != 0 && !dup {
			binary.LittleEndian.PutUint64(mem[tokenOff:], t)
			return t, ip
		}
	}
}

// samePeerProcess reports whether the far end of uc, a rendezvous connection, is this
// process (SO_PEERCRED: the kernel's word, which a peer cannot forge). Only then may the
// pair's records name loans: a reference from another process would name memory of
// ours it has no right to.
func samePeerProcess(uc *net.UnixConn) bool { return shm.PeerPID(uc) == os.Getpid() }

// lendable reports whether m's datagrams may cross p's ring as loans: the pair's both
// ends are in this process, m is unsealed (its ICRCs are nobody's to compute, so no
// byte of the payload is needed here), and it is an RC request or response (BTH opcode
// transport 0): its sender's WR completes only after the receiver acknowledged what it
// read, so the sender's memory still holds what was sent when the reader copies it. A
// UC or UD WR completes as it is sent, and its memory may be reused before the reader
// looks.
func lendable(p *shPair, m *Message) bool {
	if p.txq == nil || !m.SameHost || len(m.Loans) == 0 || m.Iov == nil || !p.txq.loans.Load() {
		return false
	}
	return m.Iov[0][0]>>5 == 0
}

// ringWriteLent is ringWrite for a message with loans (lendable): runs of datagrams
// with a loan go as records of lent datagrams, the others as records of their own
// bytes. p.txMu is held.
func (c *sameHostConn) ringWriteLent(p *shPair, m *Message) {
	seg := m.SegSize
	if seg <= 0 || seg > m.N {
		seg = m.N
	}
	nseg := (m.N + seg - 1) / seg
	for i := 0; i < nseg; {
		// The run of lent datagrams from i, and its record's size.
		j, size := i, ringHdr
		for ; j < nseg && j-i < maxLentRecord; j++ {
			l, ok := loanOf(m, j, min(seg, m.N-j*seg))
			if !ok {
				break
			}
			size += lentEntryHdr + len(m.Iov[l.Iov-1]) + len(m.Iov[l.Iov+1])
		}
		if j == i {
			// No loan, or not the layout a Loan names: the datagram's bytes.
			if !c.ringRecord(p, m, i*seg, min(seg, m.N-i*seg), 0) {
				return
			}
			i++
			continue
		}
		buf, ok := c.reserve(p, size)
		if !ok {
			return
		}
		if buf == nil {
			i = j // dropped: the ring stayed full
			continue
		}
		binary.LittleEndian.PutUint32(buf, 0)
		buf[4], buf[5], buf[6], buf[7] = byte(m.ECN&0b11), m.TrafficClass&^ECNMask, recLent, byte(j-i)
		d := buf[ringHdr:]
		p.txq.mu.Lock()
		for ; i < j; i++ {
			l := m.Loans[i]
			hdr, tail := m.Iov[l.Iov-1], m.Iov[l.Iov+1]
			d[0], d[1], d[2], d[3] = byte(len(hdr)), byte(len(tail)), 0, 0
			binary.LittleEndian.PutUint32(d[4:], p.txq.pushLocked(l.From, l.Off, len(m.Iov[l.Iov])))
			k := lentEntryHdr + copy(d[lentEntryHdr:], hdr)
			d = d[k+copy(d[k:], tail):]
		}
		p.txq.mu.Unlock()
		p.tx.Commit()
		c.lentTx.Add(uint64(buf[7]))
	}
}

// loanOf returns datagram i's loan (n bytes long) when it has one laid out as a Loan
// says: its headers, payload, and pad and ICRC are three slices of m.Iov in a row.
func loanOf(m *Message, i, n int) (Loan, bool) {
	if i >= len(m.Loans) {
		return Loan{}, false
	}
	l := m.Loans[i]
	if l.From == nil || l.Iov < 1 || l.Iov+1 >= len(m.Iov) {
		return Loan{}, false
	}
	h, t := len(m.Iov[l.Iov-1]), len(m.Iov[l.Iov+1])
	return l, h <= 255 && t <= 255 && h+len(m.Iov[l.Iov])+t == n
}

// readLent fills msgs from a record of lent datagrams of p's ring (hdr its ring header,
// data the rest), from its entry p.lentNext on: each datagram's headers, pad and ICRC
// copied into its message's Buf and its payload pinned and lent (Message.Lent) when the
// reader takes views and the lease is free, otherwise the whole datagram copied into
// Buf. It returns the messages filled and whether the record is done with (the caller
// releases it): when msgs has no room for all its entries, the next read goes on from
// p.lentNext. Entries that are malformed, name a loan out of order (both counted
// corrupt) or memory no longer registered (counted unlent) are dropped. c.rmu is held.
func (c *sameHostConn) readLent(p *shPair, hdr, data []byte, msgs []Message) (n int, done bool) {
	count := int(hdr[7])
	if p.rxq == nil {
		c.corrupt.Add(1) // a pair with another process: no loan of its can be ours
		return 0, true
	}
	ecn, tc := ECN(hdr[4]&0b11), hdr[5]&^ECNMask
	p.rxq.mu.Lock()
	defer p.rxq.mu.Unlock()
	// Skip the entries an earlier read took.
	for e := 0; e < p.lentNext; e++ {
		if len(data) < lentEntryHdr {
			break
		}
		data = data[min(len(data), lentEntryHdr+int(data[0])+int(data[1])):]
	}
	defer func() { c.lentRx.Add(uint64(n)) }() // one locked instruction a read, not a datagram
	for e := p.lentNext; e < count; e++ {
		if n == len(msgs) {
			p.lentNext = e
			return n, false
		}
		if len(data) < lentEntryHdr {
			c.corrupt.Add(1)
			break
		}
		hl, tl := int(data[0]), int(data[1])
		seq := binary.LittleEndian.Uint32(data[4:])
		if len(data) < lentEntryHdr+hl+tl {
			c.corrupt.Add(1)
			break
		}
		rest := data[lentEntryHdr : lentEntryHdr+hl+tl] // headers, then pad and ICRC
		data = data[lentEntryHdr+hl+tl:]
		l, ok := p.rxq.popLocked()
		if !ok || l.seq != seq {
			c.corrupt.Add(1)
			break
		}
		m := &msgs[n]
		if len(rest) > len(m.Buf) {
			c.corrupt.Add(1)
			continue
		}
		lease := c.lease()
		if !lease && len(rest)+l.n > len(m.Buf) {
			c.corrupt.Add(1) // longer than any datagram the reader takes
			continue
		}
		// One pin per Lender a read lends from (a stream's datagrams mostly come from
		// one region): the pin is a locked instruction on a line the sender's thread
		// writes for every datagram it gathers.
		if k := len(c.loansOut); !lease || k == 0 || c.loansOut[k-1] != l.from {
			if !l.from.Pin() {
				c.unlent.Add(1) // deregistered under the datagram: lost, as to a NIC that read it too late
				continue
			}
			if lease {
				c.loansOut = append(c.loansOut, l.from)
			}
		}
		b, ok := l.from.Slice(l.off, l.n)
		if lease {
			if !ok {
				c.corrupt.Add(1)
				continue // unpinned with the rest of the read's (ReleaseViews)
			}
			m.N, m.View, m.Lent, m.HeaderLen = copy(m.Buf, rest), nil, b, hl
		} else {
			k := 0
			if ok {
				k = copy(m.Buf, rest[:hl])
				k += copy(m.Buf[k:], b)
				k += copy(m.Buf[k:], rest[hl:])
			}
			l.from.Unpin()
			if !ok {
				c.corrupt.Add(1)
				continue
			}
			m.N, m.View, m.Lent = k, nil, nil
		}
		m.Addr, m.SegSize, m.Iov, m.ECN, m.TrafficClass, m.SameHost = p.peerSrc, 0, nil, ecn, tc, true
		n++
	}
	p.lentNext = 0
	return n, true
}

// unlendAll gives back the pins of what the last read lent (ReleaseViews).
func (c *sameHostConn) unlendAll() {
	for i, f := range c.loansOut {
		f.Unpin()
		c.loansOut[i] = nil
	}
	c.loansOut = c.loansOut[:0]
}

// PreferCopies asks the writers of this Conn's rings in this process for bytes (yes,
// what a Conn starts with) or for loans (no) (netio.LoanTaker). A pair installed later
// learns it at install.
func (c *sameHostConn) PreferCopies(yes bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loans = !yes
	for _, p := range *c.rx.Load() {
		if p.rxq != nil {
			p.rxq.loans.Store(!yes)
		}
	}
}
