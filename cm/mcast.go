package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/goverbs/goverbs/verbs"
)

// Multicast through the CM, as rdma_join_multicast does on RoCE. No MAD is sent and no
// subnet administrator asked (Linux's cma_iboe_join_multicast): the group's MGID is
// its IP address as a GID (::ffff:a.b.c.d for IPv4 on RoCEv2, the address itself for
// IPv6), the Q_Key rdma_cm's UDP one, the hop limit 64, the destination QPN 0xFFFFFF;
// and librdmacm attaches the id's UD QP to the MGID when the join completes, unless
// the join is send-only. The membership of IP multicast that carries the group (the
// kernel's IGMP join) is the device's, made when the QP attaches.

// McastQPN is the destination QP of every multicast send (the join event's qp_num).
const McastQPN = 0xFFFFFF

// JoinParam is what a join needs besides the group.
type JoinParam struct {
	// QP is the program's UD QP on the agent's device: brought to RTS with rdma_cm's
	// Q_Key (ReadyUD) and attached to the group, unless SendOnly. The address handle is
	// made in its PD.
	QP *verbs.QP
	// PD is where the address handle is made when QP is nil.
	PD *verbs.PD
	// SendOnly joins as a send-only full member (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
	// mckey -o): the QP sends to the group and is not attached, so it receives nothing.
	SendOnly bool
}

// Multicast is a joined group: what a program needs to send to it (the join event's
// rdma_ud_param) and the membership to Leave.
type Multicast struct {
	Group    netip.Addr // the IP group joined
	MGID     verbs.GID  // the group's GID: the AH's DGID and what the QP is attached to
	QPN      uint32     // McastQPN: the remote QPN of every send to the group
	QKey     uint32     // UDPQKey: the remote Q_Key of every send to the group
	HopLimit uint8
	AH       *verbs.AH // to the group, in the QP's PD or JoinParam.PD; nil with neither

	qp    *verbs.QP    // attached, or nil
	leave func() error // leaveOnce, once (sync.OnceValue)
}

// ErrNotMulticast: the address to join is not a multicast group the agent's device can
// reach (another address family, or not multicast at all).
var ErrNotMulticast = errors.New("cm: not a multicast group of the device's address family")

// JoinMulticast joins the IP multicast group (rdma_join_multicast on a UDP-port-space
// id of this agent's device) and returns the group's address handle, QPN and Q_Key,
// with p.QP attached unless p.SendOnly. Leave ends the membership.
//
// Linux's rdma_cm refuses IPv6 groups on RoCEv2 (cma_iboe_join_multicast returns
// ENOTSUPP); goverbs joins them, as IPv6 multicast.
func (a *Agent) JoinMulticast(group netip.Addr, p *JoinParam) (*Multicast, error) {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is4() != a.addr.Is4() {
		return nil, fmt.Errorf("%w: %v", ErrNotMulticast, group)
	}
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if a.k != nil {
		return a.kernelJoinMulticast(group, p)
	}
	// The MGID as cma_iboe_set_mgid makes it: IPv4-mapped for IPv4.
	m := &Multicast{Group: group, MGID: verbs.GIDFromAddr(group), QPN: McastQPN, QKey: UDPQKey, HopLimit: hopLimit}
	m.leave = sync.OnceValue(m.leaveOnce)
	pd := p.PD
	if p.QP != nil {
		if err := ReadyUD(p.QP); err != nil {
			return nil, err
		}
		pd = p.QP.PD()
		if !p.SendOnly {
			if err := p.QP.AttachMcast(m.MGID, 0); err != nil {
				return nil, err
			}
			m.qp = p.QP
		}
	}
	if pd != nil {
		ah, err := pd.CreateAH(verbs.AHAttr{DGID: m.MGID, Port: 1, HopLimit: m.HopLimit})
		if err != nil {
			m.Leave()
			return nil, err
		}
		m.AH = ah
	}
	return m, nil
}

// Leave leaves the group (rdma_leave_multicast): the QP is detached and the address
// handle closed. Leaving twice returns the first Leave's result.
func (m *Multicast) Leave() error { return m.leave() }

// leaveOnce detaches the QP and closes the AH.
func (m *Multicast) leaveOnce() error {
	var errs []error
	if m.qp != nil {
		if err := m.qp.DetachMcast(m.MGID, 0); err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if m.AH != nil {
		if err := m.AH.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
