package netio

import (
	"errors"
	"log"
	"net/netip"
	"sync"
	"time"
)

// Tee returns a Conn that behaves like c and hands a copy of every datagram
// read or written to r: GRO-coalesced reads and GSO writes are recorded one
// segment at a time. Written datagrams are recorded after the kernel took
// them (a datagram skipped with a SendError is still recorded; the Recorder
// sees what was attempted), and before any datagram read after the send
// returned: a request is always recorded before its reply, and a datagram sent
// because of one read after it. Record calls are serialized, so r need not be
// safe for concurrent use, and get the datagram's bytes only for the duration
// of the call.
//
// The Identification recorded for a read is 0: a UDP socket cannot see the
// sender's. For a write it is 0, or for segment i of a GSO send
// GSOSegmentID(0, i). IPv6 datagrams get 0.
//
// Errors from Record do not affect traffic. The first one is logged (package
// log) and kept; RecordErr on the returned Conn reports it. Recording
// continues after an error.
func Tee(c Conn, r Recorder) Conn {
	return &teeConn{Conn: c, teeRec: &teeRec{r: r}}
}

type teeConn struct {
	Conn
	*teeRec
}

// teeRec is the recording side of a Tee, shared with the Tees of the groups it joins
// (JoinGroup), so that one Recorder sees every datagram in one order.
type teeRec struct {
	r     Recorder
	mu    sync.Mutex
	first error
}

// JoinGroup joins the group underneath (see Multicaster) and records what the group's
// Conn reads, with the group's address as the destination.
func (t *teeConn) JoinGroup(group netip.Addr) (Conn, error) {
	m, ok := AsMulticaster(t.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	g, err := m.JoinGroup(group)
	if err != nil {
		return nil, err
	}
	return &teeConn{Conn: g, teeRec: t.teeRec}, nil
}

// RecordErr returns the first error the Recorder returned, if any.
func (t *teeConn) RecordErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.first
}

func (t *teeConn) ReadBatch(msgs []Message) (int, error) {
	n, err := t.Conn.ReadBatch(msgs)
	if n > 0 {
		t.recordReads(msgs[:n])
	}
	return n, err
}

func (t *teeConn) recordReads(msgs []Message) {
	now := time.Now()
	local := t.Conn.LocalAddr()
	ecn := t.Conn.Caps().ECN
	t.mu.Lock()
	for i := range msgs {
		// The sender's Identification is invisible to a UDP socket. A GRO run is
		// recorded as a goverbs GSO sender numbers it (0, 1, 2, …), a lone datagram
		// with 0: right for goverbs peers, a guess for others.
		run := 0
		if msgs[i].SegSize > 0 {
			run = 1 << 16
		}
		var ds uint8
		if ecn {
			ds = DSField(msgs[i].TrafficClass, msgs[i].ECN)
		}
		t.record(now, &msgs[i], msgs[i].Addr, local, run, ds)
	}
	t.mu.Unlock()
}

// PollBatch and WaitReadable pass through to a Poller underneath (see AsPoller).

// AsPoller returns c as a Poller if it can poll, looking through Tees.
func AsPoller(c Conn) (Poller, bool) { return asThroughTee[Poller](c) }

// asThroughTee returns c as a T (an optional interface of Conns) if c implements it.
// A Tee implements them all by passing through, so it counts as a T only when the
// Conn under it does.
func asThroughTee[T any](c Conn) (T, bool) {
	if t, ok := c.(*teeConn); ok {
		if _, ok := asThroughTee[T](t.Conn); !ok {
			var none T
			return none, false
		}
	}
	v, ok := c.(T)
	return v, ok
}

// Unwatch passes through to the Tee'd Conn (Unwatcher).
func (t *teeConn) Unwatch() {
	if u, ok := t.Conn.(Unwatcher); ok {
		u.Unwatch()
	}
}

func (t *teeConn) PollBatch(msgs []Message) (int, error) {
	p, ok := t.Conn.(Poller)
	if !ok {
		return 0, errors.ErrUnsupported
	}
	n, err := p.PollBatch(msgs)
	if n > 0 {
		t.recordReads(msgs[:n])
	}
	return n, err
}

func (t *teeConn) WaitReadable(timeout time.Duration) (bool, error) {
	p, ok := t.Conn.(Poller)
	if !ok {
		return false, errors.ErrUnsupported
	}
	return p.WaitReadable(timeout)
}

// WriteBatch holds the record lock across the send itself, so that the capture keeps
// the order in which datagrams crossed the socket: a reply to a datagram can only be
// read after the datagram was sent, and the receive loop that reads it must wait for
// this lock to record it, so it lands after the request. (Recording after the send and
// taking the lock only then let a fast reply, an ACK on loopback, be recorded first.)
func (t *teeConn) WriteBatch(msgs []Message) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.Conn.WriteBatch(msgs)
	if n > 0 {
		now := time.Now()
		src := t.Conn.SourceAddr()
		caps := t.Conn.Caps()
		for i := range msgs[:n] {
			run := 0
			if caps.GSO && msgs[i].SegSize > 0 {
				run = gsoRunSegments(msgs[i].SegSize, caps.MaxSegments, caps.MaxGSOBytes)
			}
			ecn := ECNNotECT
			if caps.ECN {
				ecn = msgs[i].ECN
			}
			t.record(now, &msgs[i], src, msgs[i].Addr, run, DSField(msgs[i].TrafficClass, ecn))
		}
	}
	return n, err
}

// record splits m into datagrams with DS field ds; run > 0 numbers them as GSO
// segments (restarting every run segments, one GSO send each). Called with t.mu held.
func (t *teeConn) record(now time.Time, m *Message, src, dst netip.AddrPort, run int, ds uint8) {
	v4 := dst.Addr().Unmap().Is4()
	dr, withDS := t.r.(DSRecorder)
	m.Segments(func(i int, seg []byte) bool {
		var id uint16
		if v4 && run > 1 {
			id = GSOSegmentID(0, i%run)
		}
		if m.SameHost {
			// Through a ring, perhaps unsealed: the capture shows it sealed, as a wire
			// carries it. Into the reader's buffer (a Tee's reader never takes views),
			// a written message's own buffer after the ring took its copy, or the copy
			// Segments makes of one that gathers: never registered memory.
			sealCapture(seg, src, dst, id)
		}
		var err error
		if withDS {
			err = dr.RecordDS(now, src, dst, id, ds, seg)
		} else {
			err = t.r.Record(now, src, dst, id, seg)
		}
		if err != nil && t.first == nil {
			t.first = err
			log.Printf("netio: tee: record: %v (later record errors are not logged)", err)
		}
		return true
	})
}
