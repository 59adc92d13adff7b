package ibping

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// ErrNoGSI explains why ibping cannot run on a kernel device.
var ErrNoGSI = errors.New("this device gives no access to QP1: a kernel RDMA device's QP1 " +
	"belongs to the kernel's MAD layer (user space reaches it through umad, not verbs), " +
	"so goverbs ibping runs on goverbs' software devices only")

// openClass opens the ping class on dev's QP1, beside any other class's user (the CM).
func openClass(dev *verbs.Device) (*verbs.GSI, error) {
	g, err := dev.OpenGSIClass(Class, ClassVersion)
	switch {
	case errors.Is(err, verbs.ErrNoGSI):
		return nil, ErrNoGSI
	case errors.Is(err, verbs.ErrGSIBusy):
		return nil, fmt.Errorf("can't serve class %d on this port: another ibping holds it", Class)
	}
	return g, err
}

// Responder is ibping -S: it answers every ping of its OUI with the host name.
type Responder struct {
	gsi  *verbs.GSI
	host string
	oui  uint32
	// Answered counts pings answered; Dropped MADs of the class that were not pings
	// this responder answers (another OUI, a response, another method) or whose
	// answer could not be sent.
	Answered, Dropped atomic.Uint64
}

// Serve starts answering pings on dev's QP1 until Close.
func Serve(dev *verbs.Device, host string, oui uint32) (*Responder, error) {
	g, err := openClass(dev)
	if err != nil {
		return nil, err
	}
	r := &Responder{gsi: g, host: host, oui: oui}
	g.SetHandler(r.input)
	return r, nil
}

// input runs on the device's receive path: it answers at once, from a copy, since the
// MAD is valid during the call only and a reply is one send.
func (r *Responder) input(from netip.Addr, b []byte) {
	m, err := Parse(b, r.oui)
	if err != nil {
		r.Dropped.Add(1)
		return
	}
	// libibmad's responder answers Get and Set alike; anything else (a response, a
	// Send, a Trap) needs no answer and gets none.
	if meth := m.Header().Method(); meth != mad.MethodGet && meth != mad.MethodSet {
		r.Dropped.Add(1)
		return
	}
	var buf [mad.Len]byte
	resp := MAD(buf[:])
	copy(resp, m)
	resp.EncodeResponse(r.host)
	if r.gsi.Send(from, resp) != nil {
		r.Dropped.Add(1)
		return
	}
	r.Answered.Add(1)
}

// Close stops answering.
func (r *Responder) Close() error { return r.gsi.Close() }

// Pinger sends pings and matches their responses by TransactionID.
type Pinger struct {
	gsi     *verbs.GSI
	oui     uint32
	timeout time.Duration
	retries int
	tid     atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan reply
	// Dropped counts MADs of the class that answered nothing outstanding or were
	// malformed.
	Dropped atomic.Uint64
}

type reply struct {
	status uint16
	host   string
}

// Retries is libibmad's MAD_DEF_RETRIES: a ping is sent this many times, each waiting
// the timeout, before it counts as lost.
const Retries = 3

// NewPinger opens the ping class on dev's QP1 for sending pings with the given OUI.
func NewPinger(dev *verbs.Device, oui uint32, timeout time.Duration) (*Pinger, error) {
	g, err := openClass(dev)
	if err != nil {
		return nil, err
	}
	p := &Pinger{gsi: g, oui: oui, timeout: timeout, retries: Retries, waiting: map[uint64]chan reply{}}
	p.tid.Store(rand.Uint64() &^ (1 << 63))
	g.SetHandler(p.input)
	return p, nil
}

func (p *Pinger) input(_ netip.Addr, b []byte) {
	m, err := Parse(b, p.oui)
	if err != nil || m.Header().Method() != mad.MethodGetResp {
		p.Dropped.Add(1)
		return
	}
	tid := m.Header().TransactionID()
	p.mu.Lock()
	ch := p.waiting[tid]
	delete(p.waiting, tid)
	p.mu.Unlock()
	if ch == nil {
		p.Dropped.Add(1) // late (after a timeout), duplicate or unasked
		return
	}
	ch <- reply{status: m.Header().Status(), host: m.Host()} // buffered: never blocks
}

// ErrTimeout: no response after Retries sends.
var ErrTimeout = errors.New("ibping: no response")

// StatusError is a response whose MAD status is not 0 (13.4.7): the peer has no ping
// responder (its QP1 answers that the class is unsupported) or refused the ping.
type StatusError struct{ Status uint16 }

func (e StatusError) Error() string {
	return fmt.Sprintf("ibping: MAD completed with error status 0x%x", e.Status)
}

// Ping pings QP1 at to and returns the round trip and the responder's host name. Like
// libibmad's RPC, it resends the same MAD (same TransactionID) after each timeout.
func (p *Pinger) Ping(ctx context.Context, to netip.Addr) (time.Duration, string, error) {
	tid := p.tid.Add(1)
	ch := make(chan reply, 1)
	p.mu.Lock()
	p.waiting[tid] = ch
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.waiting, tid)
		p.mu.Unlock()
	}()
	var buf [mad.Len]byte
	req := EncodeRequest(buf[:], tid, p.oui)
	start := time.Now()
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	for try := 0; try < p.retries; try++ {
		if err := p.gsi.Send(to, req); err != nil {
			return 0, "", err
		}
		t.Reset(p.timeout)
		select {
		case r := <-ch:
			if r.status != 0 {
				return 0, "", StatusError{r.status}
			}
			return time.Since(start), r.host, nil
		case <-t.C:
		case <-ctx.Done():
			return 0, "", ctx.Err()
		}
	}
	return 0, "", ErrTimeout
}

// Close stops the pinger.
func (p *Pinger) Close() error { return p.gsi.Close() }
