package cm

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
)

// UD resolution (SIDR) and multicast on kernel devices, through ids of rdma_cm's UDP
// port space: rdma_connect on such an id sends a SIDR_REQ and its ESTABLISHED event
// carries the server's QPN, Q_Key and an address vector; rdma_accept answers with a
// SIDR_REP; rdma_join_multicast makes the group's address vector (on RoCE the kernel
// asks no subnet administrator, and joins the IP group for the device).

func (a *Agent) kernelResolveUD(ctx context.Context, raddr netip.AddrPort, p *Param) (*UDDest, error) {
	if len(p.PrivateData) > mad.UDPrivateLen {
		return nil, ErrPrivateDataTooLong
	}
	raddr = netip.AddrPortFrom(raddr.Addr().Unmap(), raddr.Port())
	pd := p.PD
	var qpn uint32
	if p.QP != nil {
		if err := ReadyUD(p.QP); err != nil {
			return nil, err
		}
		pd, qpn = p.QP.PD(), p.QP.QPN()
	}
	k := a.k
	c := newConn(a)
	c.remote = raddr
	if err := k.register(a, c, 0, true); err != nil {
		return nil, err
	}
	defer k.release(a, c)
	if err := k.setOptions(c.kc.tok, &Param{TOS: p.TOS}, true); err != nil {
		return nil, err
	}
	if err := k.resolve(ctx, a, c, raddr); err != nil {
		return nil, err
	}
	if err := k.b.connect(c.kc.tok, &kparam{qpn: qpn}, p.PrivateData); err != nil {
		return nil, err
	}
	e, err := c.kc.wait(ctx, evEstablished)
	if err != nil {
		// The kernel reports a SIDR_REP's refusal as UNREACHABLE with the SIDR status.
		if (e.kind == evUnreachable || e.kind == evRejected) && e.status > 0 && e.status <= 0xff {
			return nil, &SIDRError{Status: mad.SIDRStatus(e.status), PrivateData: fit(e.priv, mad.SIDRRepPrivateLen)}
		}
		return nil, err
	}
	d := &UDDest{Addr: raddr, QPN: e.ud.qpn & 0xffffff, QKey: e.ud.qkey, PrivateData: fit(e.priv, mad.SIDRRepPrivateLen)}
	if pd != nil {
		if d.AH, err = pd.CreateAH(e.ud.ah); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// kernelAcceptUD answers a UD request with p.QP (rdma_accept on the request's id,
// which sends the SIDR_REP); the id is done with then.
func (r *Request) kernelAcceptUD(p *Param) error {
	c, a := r.c, r.c.a
	defer a.k.release(a, c)
	if err := ReadyUD(p.QP); err != nil {
		a.k.b.reject(c.kc.tok, nil)
		return err
	}
	if err := a.k.b.accept(c.kc.tok, &kparam{qpn: p.QP.QPN()}, p.PrivateData); err != nil {
		return c.kc.orPending(err)
	}
	return nil
}

func (r *Request) kernelRejectUD(privateData []byte) error {
	c, a := r.c, r.c.a
	defer a.k.release(a, c)
	return a.k.b.reject(c.kc.tok, privateData)
}

// orPending is the error of an event already queued that explains err, else err.
func (kc *kconn) orPending(err error) error {
	if pe := kc.pendingErr(); pe != nil {
		return pe
	}
	return err
}

// kernelJoinTimeout bounds a join: on RoCE the kernel answers at once, having asked
// nobody.
const kernelJoinTimeout = 20 * time.Second

func (a *Agent) kernelJoinMulticast(group netip.Addr, p *JoinParam) (*Multicast, error) {
	k := a.k
	c := newConn(a) // the join's id; not a connection, but its events come the same way
	if err := k.register(a, c, 0, true); err != nil {
		return nil, err
	}
	fail := func(err error) (*Multicast, error) {
		k.release(a, c)
		return nil, err
	}
	if err := k.b.bind(c.kc.tok, a.addr); err != nil {
		return fail(err)
	}
	if err := k.checkDevice(c.kc.tok, a); err != nil {
		return fail(err)
	}
	if err := k.b.join(c.kc.tok, group, p.SendOnly); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kernelJoinTimeout)
	defer cancel()
	e, err := c.kc.wait(ctx, evMulticastJoin)
	if err == context.DeadlineExceeded {
		err = ErrTimeout
	}
	if err != nil {
		return fail(err)
	}
	m := &Multicast{Group: group, MGID: e.ud.ah.DGID, QPN: e.ud.qpn & 0xffffff, QKey: e.ud.qkey, HopLimit: e.ud.ah.HopLimit}
	// Leaving detaches and closes what JoinMulticast made, then destroys the id,
	// which leaves the group.
	m.leave = sync.OnceValue(func() error {
		err := m.leaveOnce()
		k.release(a, c)
		return err
	})
	pd := p.PD
	if p.QP != nil {
		if err := ReadyUD(p.QP); err != nil {
			m.Leave()
			return nil, err
		}
		pd = p.QP.PD()
		if !p.SendOnly {
			if err := p.QP.AttachMcast(m.MGID, 0); err != nil {
				m.Leave()
				return nil, fmt.Errorf("cm: attaching QP %#x to %v: %w", p.QP.QPN(), m.MGID, err)
			}
			m.qp = p.QP
		}
	}
	if pd != nil {
		ah, err := pd.CreateAH(e.ud.ah)
		if err != nil {
			m.Leave()
			return nil, err
		}
		m.AH = ah
	}
	return m, nil
}
