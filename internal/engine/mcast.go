// Multicast (IBTA 10.5, ibv_attach_mcast): UD QPs attached to groups, each group's
// socket and receive goroutine, and the delivery of a group's packet to every QP
// attached. On RoCEv2 a multicast GID is an IP multicast address (::ffff:239.x.y.z for
// IPv4, ff00::/8 for IPv6), and a group's packets are IP multicast to it at port 4791
// (Annex A17.4.5.2). Sending needs nothing of this file: a UD SEND to an address handle
// whose DGID is a group goes to the group's address like any destination.

package engine

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// McastQPN is the destination QP of every multicast packet (IBTA Vol. 1 10.5 and 9.8.3:
// a multicast UD packet carries the QPN 0xFFFFFF, and every QP attached to the group
// receives it); a UD SEND to a group names it as its remote QPN.
const McastQPN = 0xFFFFFF

// The device's multicast limits (ibv_query_device's max_mcast_grp, max_mcast_qp_attach,
// max_total_mcast_qp_attach). Each group costs a socket and a goroutine, so the number
// of groups stays well below rxe's 8192; the QPs per group are rxe's 56.
const (
	MaxMcastGroups        = 1024
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = MaxMcastGroups * MaxMcastQPAttach
)

var (
	ErrNotMcastGID   = driver.NewError(driver.ErrInvalidAttr, "GID is not a multicast group of the device's address family")
	ErrMcastQPType   = driver.NewError(driver.ErrInvalidAttr, "only a UD QP can be attached to a multicast group")
	ErrNotAttached   = driver.NewError(driver.ErrInvalidAttr, "QP is not attached to the multicast group")
	ErrMcastLimit    = driver.NewError(driver.ErrLimit, "multicast group or attachment limit reached")
	ErrNoMcastSocket = &driver.Error{Kind: errors.ErrUnsupported, Err: errors.New("the device's connection cannot join multicast groups")}
)

// mcastGroup is one group the device has joined: its own Conn (netio.Multicaster) and
// the goroutine that reads it, and the QPs attached.
type mcastGroup struct {
	gid  [16]byte
	conn netio.Conn
	to   netip.AddrPort // the group's address and port: its packets' destination
	// qps are the attached QPs, replaced whole under the table's lock and read without
	// one: the receive goroutine's packet costs no lock but the QPs' own.
	qps  atomic.Pointer[[]*QP]
	done chan struct{}
}

// mcastTable is the device's groups.
type mcastTable struct {
	mu     sync.Mutex
	groups map[[16]byte]*mcastGroup
}

// AttachMcast attaches a UD QP to the multicast group gid (ibv_attach_mcast): from now
// on it receives a copy of every packet sent to the group whose Q_Key is its own. The
// first attachment joins the group (netio.Multicaster); attaching twice is no error.
// lid is InfiniBand's multicast LID, which RoCE has none of: it is ignored.
func (qp *QP) AttachMcast(gid driver.GID, lid uint16) error {
	d := qp.dev
	if qp.typ != driver.QPTypeUD {
		return ErrMcastQPType
	}
	group := GIDToAddr(gid)
	if !group.IsMulticast() || group.Is4() != d.local.Addr().Unmap().Is4() {
		return ErrNotMcastGID
	}
	t := &d.mcast
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.closed.Load() {
		return ErrDeviceClosed
	}
	qp.mu.Lock()
	closed := qp.closed
	qp.mu.Unlock()
	if closed {
		return ErrQPClosed
	}
	g := t.groups[gid]
	if g != nil && slices.Contains(*g.qps.Load(), qp) {
		return nil
	}
	// The device-wide limit (MaxTotalMcastQPAttach) is the product of these two.
	if g != nil && len(*g.qps.Load()) >= MaxMcastQPAttach || g == nil && len(t.groups) >= MaxMcastGroups {
		return ErrMcastLimit
	}
	if g == nil {
		var err error
		if g, err = d.joinGroup(gid, group); err != nil {
			return err
		}
		t.groups[gid] = g
	}
	qps := append(slices.Clone(*g.qps.Load()), qp)
	g.qps.Store(&qps)
	qp.mu.Lock()
	qp.mcast = append(qp.mcast, g)
	qp.mu.Unlock()
	return nil
}

// DetachMcast detaches the QP from the group (ibv_detach_mcast): once it returns, no
// packet of the group reaches the QP. The last QP to leave leaves the group.
func (qp *QP) DetachMcast(gid driver.GID, lid uint16) error {
	d := qp.dev
	t := &d.mcast
	t.mu.Lock()
	g := t.groups[gid]
	if g == nil || !slices.Contains(*g.qps.Load(), qp) {
		t.mu.Unlock()
		return ErrNotAttached
	}
	last := d.detachLocked(qp, g)
	t.mu.Unlock()
	if last {
		d.leaveGroup(g)
	}
	return nil
}

// detachAll detaches a closing QP from every group it is attached to.
func (qp *QP) detachAll() {
	d := qp.dev
	t := &d.mcast
	t.mu.Lock()
	qp.mu.Lock()
	groups := slices.Clone(qp.mcast)
	qp.mu.Unlock()
	var left []*mcastGroup
	for _, g := range groups {
		if d.detachLocked(qp, g) {
			left = append(left, g)
		}
	}
	t.mu.Unlock()
	for _, g := range left {
		d.leaveGroup(g)
	}
}

// detachLocked removes qp from g and reports whether g is left empty (and is then out
// of the table, its Conn for the caller to close with leaveGroup). The table's lock is
// held. The QP's own list changes under its lock, which delivery holds: a packet read
// before the detach but delivered after it finds the QP no longer a member.
func (d *Device) detachLocked(qp *QP, g *mcastGroup) bool {
	t := &d.mcast
	qps := slices.DeleteFunc(slices.Clone(*g.qps.Load()), func(q *QP) bool { return q == qp })
	g.qps.Store(&qps)
	qp.mu.Lock()
	qp.mcast = slices.DeleteFunc(qp.mcast, func(x *mcastGroup) bool { return x == g })
	qp.mu.Unlock()
	if len(qps) > 0 {
		return false
	}
	delete(t.groups, g.gid)
	return true
}

// joinGroup joins the group on the device's Conn and starts its receive goroutine.
func (d *Device) joinGroup(gid [16]byte, group netip.Addr) (*mcastGroup, error) {
	m, ok := netio.AsMulticaster(d.conn)
	if !ok {
		return nil, ErrNoMcastSocket
	}
	conn, err := m.JoinGroup(group)
	if err != nil {
		return nil, &driver.Error{Kind: driver.ErrUnavailable, Err: err}
	}
	g := &mcastGroup{gid: gid, conn: conn, to: conn.LocalAddr(), done: make(chan struct{})}
	g.qps.Store(&[]*QP{})
	go d.mcastLoop(g)
	return g, nil
}

// leaveGroup closes the group's Conn, which leaves the group, and waits for its
// goroutine to end.
func (d *Device) leaveGroup(g *mcastGroup) {
	g.conn.Close()
	<-g.done
}

// closeMcast leaves every group (Device.Close, after its QPs have closed).
func (d *Device) closeMcast() {
	t := &d.mcast
	t.mu.Lock()
	groups := slices.Collect(maps.Values(t.groups))
	clear(t.groups)
	t.mu.Unlock()
	for _, g := range groups {
		d.leaveGroup(g)
	}
}

// mcastBatch is the receive batch of a group's goroutine: UD messages of one MTU at
// most, no GRO runs.
const mcastBatch = 16

// mcastLoop reads a group's Conn until it closes and delivers each packet.
func (d *Device) mcastLoop(g *mcastGroup) {
	defer close(g.done)
	msgs := make([]netio.Message, mcastBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 2*txBufSize)
	}
	var p wire.Packet
	for {
		n, err := g.conn.ReadBatch(msgs)
		raceAcquireWire()
		if err != nil {
			if isClosed(err) {
				return
			}
			d.rxError(err)
			continue
		}
		for i := range msgs[:n] {
			m := &msgs[i]
			d.inputMcast(g, &p, m.Buf[:m.N], m.Addr)
		}
	}
}

// inputMcast checks a packet that arrived for a group and delivers it to every QP
// attached (IBTA 10.5.2: each member gets a copy; 9.6 and A17.4 for the checks, with
// the group's address as the destination the ICRC covers).
func (d *Device) inputMcast(g *mcastGroup, p *wire.Packet, b []byte, from netip.AddrPort) {
	if !d.parseRx(p, b, from) || !d.checkRx(p, b, from, g.to, nil, 0) {
		return
	}
	// Only UD sends are multicast, always to QPN 0xFFFFFF (IBTA 10.5, 9.8.3).
	if p.Op.Transport != wire.TransportUD {
		d.counters.BadTransport.Add(1)
		return
	}
	if p.BTH.DestQP() != McastQPN {
		d.counters.NoQP.Add(1)
		return
	}
	d.counters.McastPackets.Add(1)
	for _, qp := range *g.qps.Load() {
		qp.mu.Lock()
		if slices.Contains(qp.mcast, g) && !qp.ownMcast(p, from) {
			qp.receive(p, from, g.to)
		}
		qp.mu.Unlock()
	}
}

// ownMcast reports whether a group's packet is the QP's own, looped back, and the QP
// was created not to receive those (QPInit.BlockSelfMcastLoopback,
// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB). Without the flag a member hears itself, as a
// multicast-loopback HCA delivers to every QP attached on the port. qp.mu is held.
func (qp *QP) ownMcast(p *wire.Packet, from netip.AddrPort) bool {
	return qp.blockSelfMcast && p.DETH.SrcQP() == qp.qpn && from.Addr().Unmap() == qp.dev.local.Addr().Unmap()
}
