package perftestcomm

import (
	"errors"
	"net"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// pair runs the client's f and the server's g on the two ends of a pipe.
func pair(t *testing.T, client, server func(c net.Conn) error) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	errc := make(chan error, 1)
	go func() { errc <- server(s) }()
	if err := client(c); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestHello: two goverbs tools recognise each other by the mark after the version, and
// --perftest-exchange (plain) on either side hides it.
func TestHello(t *testing.T) {
	for _, c := range []struct {
		plainClient, plainServer bool
		want                     bool
	}{{false, false, true}, {true, false, false}, {false, true, false}} {
		var cg, sg bool
		var cv, sv float64
		pair(t, func(conn net.Conn) (err error) {
			cg, cv, err = Hello(conn, true, c.plainClient)
			return err
		}, func(conn net.Conn) (err error) {
			sg, sv, err = Hello(conn, false, c.plainServer)
			return err
		})
		if cg != c.want || sg != c.want || cv != 6.06 || sv != 6.06 {
			t.Errorf("plain %v/%v: goverbs %v/%v, versions %v/%v; want %v, 6.06", c.plainClient, c.plainServer, cg, sg, cv, sv, c.want)
		}
	}
}

// TestHelloForeign: a peer whose first bytes are no perftest version (an rdma-core
// ping-pong's record) or an older perftest than perftest accepts is refused.
func TestHelloForeign(t *testing.T) {
	for _, peer := range []string{"0000:000011:0000", "5.60\x00"} {
		c, s := net.Pipe()
		go func() {
			b := make([]byte, versionLen)
			copy(b, peer)
			s.Write(b)
			s.Read(make([]byte, versionLen))
		}()
		if _, _, err := Hello(c, false, false); !errors.Is(err, ErrForeignPeer) {
			t.Errorf("peer %q: %v, want ErrForeignPeer", peer, err)
		}
		c.Close()
		s.Close()
	}
}

var dest = Dest{LID: 1, OutReads: 16, QPN: 0x123456, PSN: 0xabcdef, RKey: 0xdeadbeef, VAddr: 0x7f0011223344,
	GID: verbs.GID{10: 0xff, 11: 0xff, 12: 127, 15: 1}}

func TestKeyRecord(t *testing.T) {
	b := KeyRecord(dest)
	want := "0001:0010:123456:abcdef:deadbeef:00007f0011223344:00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:01:00000000:"
	if len(b) != perfKeyLen || string(b[:len(want)]) != want || b[len(want)] != 0 {
		t.Fatalf("record %q, want %q and NULs to %d bytes", b, want, perfKeyLen)
	}
	got, err := ParseKeyRecord(b)
	if err != nil || got != dest {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, dest)
	}
	if _, err := ParseKeyRecord([]byte("0001:0010:123456\x00")); err == nil {
		t.Fatal("a short record parsed")
	}
}

// TestKeyRecordBin: the binary record keeps the peer version's layout, and parsing
// reads the layout from the length.
func TestKeyRecordBin(t *testing.T) {
	for ver, n := range map[float64]int{6.06: keyBinLenOld, 6.28: KeyBinLen, 6.29: KeyBinLen} {
		b := KeyRecordBin(dest, ver)
		if len(b) != n {
			t.Errorf("version %v: %d bytes, want %d", ver, len(b), n)
		}
		if got, err := ParseKeyRecordBin(b); err != nil || got != dest {
			t.Errorf("version %v: parsed %+v, %v; want %+v", ver, got, err, dest)
		}
	}
	if _, err := ParseKeyRecordBin(make([]byte, 60)); err == nil {
		t.Error("a 60-byte record parsed")
	}
}

// TestExchangeSteps: the system facts take the larger cycle buffer, the MTU the smaller,
// a key record crosses, and reports keep their iteration count in the width the peer's
// version uses.
func TestExchangeSteps(t *testing.T) {
	for _, ver := range []float64{5.32, 6.06} {
		mine := Report{Bytes: 65536, Iterations: 5000, Peak: 1234.5, Avg: 1200.25, MsgRate: 0.019}
		theirs := Report{Bytes: 65536, Iterations: 5000, Peak: 1, Avg: 2, MsgRate: 3}
		var gotMine, gotTheirs Report
		var cb int
		var mtu verbs.MTU
		var key Dest
		pair(t, func(c net.Conn) (err error) {
			w := NewExchange(c, true, ver)
			if cb, err = w.SysData(); err != nil {
				return err
			}
			if mtu, err = w.MTU(verbs.MTU4096); err != nil {
				return err
			}
			if key, err = w.Key(dest, "QP record"); err != nil {
				return err
			}
			gotTheirs, err = w.Report(mine)
			return err
		}, func(c net.Conn) (err error) {
			w := NewExchange(c, false, ver)
			if _, err = w.SysData(); err != nil {
				return err
			}
			if _, err = w.MTU(verbs.MTU1024); err != nil {
				return err
			}
			if _, err = w.Key(Dest{QPN: 7}, "QP record"); err != nil {
				return err
			}
			gotMine, err = w.Report(theirs)
			return err
		})
		if cb != pageSize || mtu != verbs.MTU1024 || key.QPN != 7 || gotMine != mine || gotTheirs != theirs {
			t.Errorf("version %v: cycle %d, MTU %v, key %+v, reports %+v %+v", ver, cb, mtu, key, gotMine, gotTheirs)
		}
	}
}
