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

	"golang.org/x/sys/unix"
)

// recLent, in a ring record's header byte 6, marks a lent datagram: the record holds its
// headers (the header's byte 7 says how many bytes), then its pad and ICRC, then the
// loan's sequence number (uint32); the payload is the next loan of the pair's queue.
const recLent = 1

// tokenOff is where a region's header holds the token that names its loan queues in
// this process (localRegions), written by the side that creates the region.
const tokenOff = 16

// loanQueue carries one ring's loans in the order their records were written: the
// writer pushes under the pair's txMu, the reader pops under its Conn's rmu. A circular
// buffer that doubles when full (never beyond what the ring holds in lent records).
type loanQueue struct {
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

// push queues a loan and returns its sequence number, which its record carries.
func (q *loanQueue) push(from Lender, off, n int) uint32 {
	q.mu.Lock()
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
	q.mu.Unlock()
	return s
}

// pop takes the oldest loan; false when there is none.
func (q *loanQueue) pop() (queuedLoan, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
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
func samePeerProcess(uc *net.UnixConn) bool {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	same := false
	rc.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		same = err == nil && int(cred.Pid) == os.Getpid()
	})
	return same
}

// lendable reports whether m's datagrams may cross p's ring as loans: the pair's both
// ends are in this process, m is unsealed (its ICRCs are nobody's to compute, so no
// byte of the payload is needed here), and it is an RC request or response (BTH opcode
// transport 0): its sender's WR completes only after the receiver acknowledged what it
// read, so the sender's memory still holds what was sent when the reader copies it. A
// UC or UD WR completes as it is sent, and its memory may be reused before the reader
// looks.
func lendable(p *shPair, m *Message) bool {
	if p.txq == nil || !m.SameHost || len(m.Loans) == 0 || m.Iov == nil {
		return false
	}
	return m.Iov[0][0]>>5 == 0
}

// ringWriteLent is ringWrite for a message with loans (lendable): each datagram with a
// loan goes as a lent record, the others as records of their own bytes. p.txMu is held.
func (c *sameHostConn) ringWriteLent(p *shPair, m *Message) {
	seg := m.SegSize
	if seg <= 0 || seg > m.N {
		seg = m.N
	}
	for i, off := 0, 0; off < m.N; i, off = i+1, off+seg {
		n := min(seg, m.N-off)
		var l Loan
		if i < len(m.Loans) {
			l = m.Loans[i]
		}
		if l.From == nil || l.Iov < 1 || l.Iov+1 >= len(m.Iov) ||
			len(m.Iov[l.Iov-1]) > 255 || len(m.Iov[l.Iov-1])+len(m.Iov[l.Iov])+len(m.Iov[l.Iov+1]) != n {
			// No loan, or not the layout a Loan names: the datagram's bytes.
			if !c.ringRecord(p, m, off, n, 0) {
				return
			}
			continue
		}
		hdr, tail := m.Iov[l.Iov-1], m.Iov[l.Iov+1]
		buf, ok := c.reserve(p, ringHdr+len(hdr)+len(tail)+4)
		if !ok {
			return
		}
		if buf == nil {
			continue // dropped: the ring stayed full
		}
		binary.LittleEndian.PutUint32(buf, 0)
		buf[4], buf[5], buf[6], buf[7] = byte(m.ECN&0b11), m.TrafficClass&^ECNMask, recLent, byte(len(hdr))
		d := buf[ringHdr:]
		k := copy(d, hdr)
		k += copy(d[k:], tail)
		binary.LittleEndian.PutUint32(d[k:], p.txq.push(l.From, l.Off, len(m.Iov[l.Iov])))
		p.tx.Commit()
		c.lentTx.Add(1)
	}
}

// readLent turns a lent record of p's ring (hdr its ring header, data the rest) into m:
// the datagram's headers, pad and ICRC copied into m.Buf and its payload pinned and lent
// (Message.Lent) when the reader takes views and the lease is free, otherwise the whole
// datagram copied into m.Buf. It reports false when the record is to be dropped: a lent
// record on a pair that cannot carry one or a loan out of order (both counted corrupt),
// or memory no longer registered (counted unlent). c.rmu is held.
func (c *sameHostConn) readLent(p *shPair, hdr, data []byte, m *Message) bool {
	hl := int(hdr[7])
	if p.rxq == nil || len(data) < hl+4+4 || len(data)-4 > len(m.Buf) {
		c.corrupt.Add(1)
		return false
	}
	seq := binary.LittleEndian.Uint32(data[len(data)-4:])
	l, ok := p.rxq.pop()
	if !ok || l.seq != seq {
		c.corrupt.Add(1)
		return false
	}
	b, ok := l.from.Lend(l.off, l.n)
	if !ok {
		c.unlent.Add(1) // deregistered under the datagram: lost, as to a NIC that read it too late
		return false
	}
	c.lentRx.Add(1)
	rest := data[:len(data)-4] // headers, then pad and ICRC
	if c.lease() {
		c.loansOut = append(c.loansOut, l.from)
		m.N, m.View, m.Lent, m.HeaderLen = copy(m.Buf, rest), nil, b, hl
		return true
	}
	if len(rest)+len(b) > len(m.Buf) {
		l.from.Unlend()
		c.corrupt.Add(1) // longer than any datagram the reader takes
		return false
	}
	k := copy(m.Buf, rest[:hl])
	k += copy(m.Buf[k:], b)
	k += copy(m.Buf[k:], rest[hl:])
	l.from.Unlend()
	m.N, m.View, m.Lent = k, nil, nil
	return true
}

// unlendAll gives back the pins of what the last read lent (ReleaseViews).
func (c *sameHostConn) unlendAll() {
	for i, f := range c.loansOut {
		f.Unlend()
		c.loansOut[i] = nil
	}
	c.loansOut = c.loansOut[:0]
}
