package rdmanet

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// testDevices opens two software devices on loopback addresses no other test uses.
func testDevices(t testing.TB) (a, b *verbs.Device) {
	t.Helper()
	open := func() *verbs.Device {
		dev := testaddr.Open(t, testaddr.RDMANet, func(ip netip.Addr) (*verbs.Device, error) {
			return verbs.OpenSoft(verbs.SoftConfig{Addr: ip})
		})
		t.Cleanup(func() { dev.Close() })
		return dev
	}
	return open(), open()
}

// testPair connects two Conns over RC QPs on devices a and b, exchanging the setup
// messages directly (the CM's job in Dial and Listen).
func testPair(t testing.TB, a, b *verbs.Device) (ca, cb *Conn, err error) {
	return testPairSized(t, a, b, ringSize, msgCredits)
}

// testPairSized is testPair with rings of ring bytes and credits message credits.
func testPairSized(t testing.TB, a, b *verbs.Device, ring, credits int) (ca, cb *Conn, err error) {
	epa, err := newTestEndpoint(t, a, ring, credits)
	if err != nil {
		return nil, nil, err
	}
	epb, err := newTestEndpoint(t, b, ring, credits)
	if err != nil {
		epa.close()
		return nil, nil, err
	}
	sa, err := parseConnData(epb.connData().marshal(nil))
	if err != nil {
		return nil, nil, err
	}
	sb, err := parseConnData(epa.connData().marshal(nil))
	if err != nil {
		return nil, nil, err
	}
	if err := connectQP(epa.qp, a, epb.qp, b); err != nil {
		return nil, nil, err
	}
	if err := connectQP(epb.qp, b, epa.qp, a); err != nil {
		return nil, nil, err
	}
	addr := func(d *verbs.Device, qp *verbs.QP) *Addr {
		return &Addr{netip.AddrPortFrom(gidAddr(t, d), uint16(qp.QPN()))}
	}
	ca = newConn(epa, sa, addr(a, epa.qp), addr(b, epb.qp), nil, nil)
	cb = newConn(epb, sb, addr(b, epb.qp), addr(a, epa.qp), nil, nil)
	return ca, cb, nil
}

func newTestEndpoint(t testing.TB, d *verbs.Device, ring, credits int) (*endpoint, error) {
	pd, err := d.AllocPD()
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { pd.Close() })
	return newEndpointSized(pd, ring, credits)
}

func gidAddr(t testing.TB, d *verbs.Device) netip.Addr {
	gid, err := d.QueryGID(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.AddrFrom16(gid)
	return ip.Unmap()
}

// connectQP brings qp from INIT to RTS towards peer, as the CM does.
func connectQP(qp *verbs.QP, dev *verbs.Device, peer *verbs.QP, peerDev *verbs.Device) error {
	gid, err := peerDev.QueryGID(1, 0)
	if err != nil {
		return err
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU4096,
		DestQPN: peer.QPN(), RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
			verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("RTR: %w", err)
	}
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, Timeout: 14,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("RTS: %w", err)
	}
	return nil
}
