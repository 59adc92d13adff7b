package ibping

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Devices on an in-memory network: no sockets, no addresses to share with other tests.
func simDevices(t *testing.T, addrs ...string) []*verbs.Device {
	t.Helper()
	n := simnet.New(1, simnet.Faults{})
	var out []*verbs.Device
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		c, err := n.Listen(netip.AddrPortFrom(a, wire.UDPPort))
		if err != nil {
			t.Fatal(err)
		}
		d, err := verbs.OpenSoft(verbs.SoftConfig{Name: "sim" + s, Addr: a, Conn: c})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		out = append(out, d)
	}
	return out
}

// servePing puts a responder answering with host on 10.0.0.1 and a pinger on 10.0.0.2;
// both close when the test ends. The responder's device is returned too.
func servePing(t *testing.T, host string) (*verbs.Device, *Responder, *Pinger) {
	t.Helper()
	devs := simDevices(t, "10.0.0.1", "10.0.0.2")
	r, err := Serve(devs[0], host, OpenIBOUI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	p, err := NewPinger(devs[1], OpenIBOUI, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return devs[0], r, p
}

func TestPingResponder(t *testing.T) {
	dev, r, p := servePing(t, "server.example")
	for i := 0; i < 3; i++ {
		rtt, host, err := p.Ping(context.Background(), netip.MustParseAddr("10.0.0.1"))
		if err != nil || host != "server.example" || rtt <= 0 {
			t.Fatalf("ping %d: %v %q %v", i, rtt, host, err)
		}
	}
	if r.Answered.Load() != 3 || r.Dropped.Load() != 0 {
		t.Fatalf("responder answered %d dropped %d", r.Answered.Load(), r.Dropped.Load())
	}
	if _, err := Serve(dev, "again", OpenIBOUI); err == nil {
		t.Fatal("a second responder on one device")
	}
}

// A device without a responder answers that the class is unsupported (its QP1 does,
// see verbs.GSICounters): the ping fails at once, with the status, not by timing out.
// An address with no device times out after the retries.
func TestPingNoResponder(t *testing.T) {
	devs := simDevices(t, "10.0.0.1", "10.0.0.2")
	p, err := NewPinger(devs[1], OpenIBOUI, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, _, err = p.Ping(context.Background(), netip.MustParseAddr("10.0.0.1"))
	var se StatusError
	if !errors.As(err, &se) || se.Status != 0x0004 {
		t.Fatalf("ping of a device with no responder: %v", err)
	}
	start := time.Now()
	_, _, err = p.Ping(context.Background(), netip.MustParseAddr("10.0.0.9"))
	if !errors.Is(err, ErrTimeout) || time.Since(start) < Retries*50*time.Millisecond {
		t.Fatalf("ping of nobody: %v after %v", err, time.Since(start))
	}
}

// Hostile MADs of the ping class reach the responder and the pinger: each is dropped
// and counted, none is answered, nothing panics.
func TestHostileMADs(t *testing.T) {
	_, r, p := servePing(t, "s")
	req := func(edit func(m MAD)) []byte {
		b := make([]byte, mad.Len)
		m := EncodeRequest(b, 5, OpenIBOUI)
		edit(m)
		return b
	}
	hostile := [][]byte{
		req(func(m MAD) { m[3] = byte(mad.MethodGetResp) }), // a response, unasked
		req(func(m MAD) { m[3] = byte(mad.MethodSend) }),    // a method ibping does not answer
		req(func(m MAD) { m[3] = 0x05 }),                    // Trap
		req(func(m MAD) { m.setOUI(0x123456) }),             // another vendor
	}
	for _, m := range hostile {
		r.input(netip.MustParseAddr("10.0.0.2"), m)
		p.input(netip.MustParseAddr("10.0.0.1"), m)
	}
	for _, short := range [][]byte{nil, {1}, make([]byte, 255), make([]byte, 257)} {
		r.input(netip.MustParseAddr("10.0.0.2"), short)
		p.input(netip.MustParseAddr("10.0.0.1"), short)
	}
	if r.Answered.Load() != 0 || r.Dropped.Load() != 8 {
		t.Fatalf("responder answered %d dropped %d, want 0 and 8", r.Answered.Load(), r.Dropped.Load())
	}
	if p.Dropped.Load() != 8 {
		t.Fatalf("pinger dropped %d, want 8", p.Dropped.Load())
	}
	// A Set is answered, as libibmad's responder answers it: with a GetResp.
	r.input(netip.MustParseAddr("10.0.0.2"), req(func(m MAD) { m[3] = byte(mad.MethodSet) }))
	if r.Answered.Load() != 1 {
		t.Fatalf("Set not answered")
	}
}

// The responder and the connection manager share one device's QP1: each gets its own
// class. A CM request to a port nobody listens on is rejected by the peer's CM (so CM
// MADs flow both ways) while pings are answered on the same device.
func TestResponderBesideCM(t *testing.T) {
	devs := simDevices(t, "10.0.0.1", "10.0.0.2")
	srvCM, err := cm.NewAgent(devs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srvCM.Close()
	r, err := Serve(devs[0], "s", OpenIBOUI)
	if err != nil {
		t.Fatalf("responder beside the CM: %v", err)
	}
	defer r.Close()
	cliCM, err := cm.NewAgent(devs[1], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cliCM.Close()
	p, err := NewPinger(devs[1], OpenIBOUI, time.Second)
	if err != nil {
		t.Fatalf("pinger beside the CM: %v", err)
	}
	defer p.Close()

	if _, host, err := p.Ping(context.Background(), netip.MustParseAddr("10.0.0.1")); err != nil || host != "s" {
		t.Fatalf("ping beside the CM: %q %v", host, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pd, err := devs[1].AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	cq, err := devs[1].CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	param := &cm.Param{PD: pd, QPInit: verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}}
	_, err = cliCM.Dial(ctx, netip.MustParseAddrPort("10.0.0.1:7471"), param)
	var rej *cm.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("dial to no listener: %v, want the peer CM's REJ", err)
	}
	if c := srvCM.Counters(); c.MADsReceived == 0 {
		t.Fatalf("the server's CM received no MAD: %+v", c)
	}
	if _, _, err := p.Ping(context.Background(), netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Fatalf("ping after the CM exchange: %v", err)
	}
}
