//go:build linux

package afxdp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/afxdp"
)

func TestSmoke(t *testing.T) {
	n := newTestNet(t, 3000)
	var x *afxdp.Conn
	var u netio.Conn
	var err error
	in(t, n.A, func() { x, err = afxdp.Open(afxdp.Options{Addr: netip.AddrPortFrom(n.AddrA, 4791), Interface: ifA}) })
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	t.Logf("%v %+v", x, x.Info())
	in(t, n.B, func() { u, err = netio.ListenUDP(netip.AddrPortFrom(n.AddrB, 4791), netio.UDPOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	t.Log(n.ip(t, "-n", n.A, "-d", "link", "show", ifA))
	if _, err := u.WriteBatch([]netio.Message{{Buf: []byte("hello"), N: 5, Addr: x.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	msgs := []netio.Message{{Buf: make([]byte, 2048)}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		k, err := x.ReadBatch(msgs)
		t.Logf("read %d %v: %q from %v", k, err, msgs[0].Buf[:msgs[0].N], msgs[0].Addr)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Errorf("no packet: %+v", x.Stats())
		x.Close()
		<-done
		return
	}
	t0 := time.Now()
	if k, err := x.WriteBatch([]netio.Message{{Buf: []byte("world"), N: 5, Addr: u.LocalAddr()}}); err != nil {
		t.Fatal(k, err)
	}
	t.Logf("write took %v; stats %+v", time.Since(t0), x.Stats())
	go func() {
		time.Sleep(2 * time.Second)
		u.Close()
	}()
	k, err := u.ReadBatch(msgs)
	t.Logf("udp read %d %v: %q from %v", k, err, msgs[0].Buf[:msgs[0].N], msgs[0].Addr)
}
