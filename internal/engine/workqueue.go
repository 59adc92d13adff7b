// The send and receive queues' layout: a WQE's slot, what the transport keeps of its
// progress, and the rings of slots a QP posts into.

package engine

import (
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// wqeState is where a send WQE is in its life (rxe's wqe_state).
type wqeState uint8

const (
	wqePosted  wqeState = iota // not yet looked at by the requester
	wqeSending                 // PSNs assigned, some packets not (re)sent yet
	wqeSent                    // every packet sent, awaiting ACK/response (RC)
	wqeDone                    // finished, with status; the completer retires it in order
)

// sendWQE is one send-queue slot: the work request (copied at post time into storage the
// slot owns, so posting does not allocate) and its transport progress.
type sendWQE struct {
	wr       driver.SendWR
	sgeStore []driver.SGE
	inline   []byte         // inline payload copied at post time
	bind     BindMW         // BIND_MW: the binding, copied at post time
	udDst    netip.AddrPort // UD: the destination, from the AH at post time
	udTC     uint8          // UD: the AH's traffic class
	local    sgl            // SGL resolved to memory
	length   int

	state    wqeState
	firstPSN wire.PSN
	npkts    uint32 // PSNs the message occupies (READ: response packets)
	next     uint32 // requester: next packet to send
	got      uint32 // completer: READ responses placed so far
	status   driver.WCStatus
	vendor   uint32
}

func (w *sendWQE) lastPSN() wire.PSN { return w.firstPSN.Add(w.npkts - 1) }

func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case driver.WRRDMARead, driver.WRAtomicCmpAndSwp, driver.WRAtomicFetchAdd:
		return true
	}
	return false
}

// wqRing is a work queue's ring of entries, with cursors that count up without
// wrapping: head (oldest not retired) and tail (next free). at is on every WQE's path
// several times (the post, the requester, each ACK's walk, the retirement), and a
// remainder by a length the compiler cannot see is a 64-bit division, tens of cycles
// each: a ring whose length is a power of two (perftest's depths, most programs') finds
// its slot with a mask instead. Other depths keep the division: rounding their rings up
// to a power of two doubled rdmanet's (261 and 288 entries), and its request/response
// with both ends in one process took 1.09x the time (16 interleaved rounds), the rings
// spread over more cache lines than the divisions cost.
type wqRing[T any] struct {
	wqes       []T
	mask       uint64 // len(wqes)-1, when pow2
	pow2       bool
	head, tail uint64
}

func (q *wqRing[T]) init(depth uint32) {
	q.wqes = make([]T, depth)
	q.mask, q.pow2 = uint64(depth)-1, depth > 0 && depth&(depth-1) == 0
}

func (q *wqRing[T]) at(i uint64) *T {
	if q.pow2 {
		return &q.wqes[i&q.mask]
	}
	return &q.wqes[i%uint64(len(q.wqes))]
}

// full reports whether the queue holds as many entries as it has slots.
func (q *wqRing[T]) full() bool { return q.tail-q.head >= uint64(len(q.wqes)) }

// sendQueue is the send queue's ring, with a third cursor between head and tail: req,
// the next WQE the requester works on.
type sendQueue struct {
	wqRing[sendWQE]
	req uint64
}

type recvWQE struct {
	id       uint64
	sgeStore []driver.SGE
	local    sgl
}

// recvQueue is a receive queue's ring (a QP's or an SRQ's).
type recvQueue = wqRing[recvWQE]
