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

// sendQueue is a ring of WQEs with three cursors, all counting up without wrapping:
// head (oldest not retired), req (next the requester works on), tail (next free).
type sendQueue struct {
	wqes            []sendWQE
	head, req, tail uint64
}

func (q *sendQueue) at(i uint64) *sendWQE { return &q.wqes[i%uint64(len(q.wqes))] }

type recvWQE struct {
	id       uint64
	sgeStore []driver.SGE
	local    sgl
}

// recvQueue is a ring of receive WQEs.
type recvQueue struct {
	wqes       []recvWQE
	head, tail uint64
}

func (q *recvQueue) at(i uint64) *recvWQE { return &q.wqes[i%uint64(len(q.wqes))] }
