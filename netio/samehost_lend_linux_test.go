//go:build linux

package netio_test

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

// testLender is registered memory that loans name (netio.Lender), counting its pins.
type testLender struct {
	buf  []byte
	pins atomic.Int32
	dead atomic.Bool // deregistered: Pin fails
}

func (l *testLender) Pin() bool {
	if l.dead.Load() {
		return false
	}
	l.pins.Add(1)
	return true
}

func (l *testLender) Slice(off, n int) ([]byte, bool) {
	if off < 0 || n < 0 || off+n > len(l.buf) {
		return nil, false
	}
	return l.buf[off : off+n], true
}

func (l *testLender) Unpin() { l.pins.Add(-1) }

// lentRun is a GSO run of k unsealed datagrams of opcode op to dst, each a payload of
// size bytes from l.buf (datagram i's at i*size) gathered between its headers and its
// pad and ICRC, as the engine lays one out (commitGather), with a loan for each; and the
// datagrams as they must arrive.
func lentRun(l *testLender, dst netip.AddrPort, op wire.Opcode, k, size int) (netio.Message, [][]byte) {
	m := netio.Message{Addr: dst, SameHost: true}
	var want [][]byte
	for i := range k {
		h := wire.Headers{BTH: wire.BTHFields{Opcode: op, PKey: 0xffff, DestQP: 0x11, PSN: wire.PSN(i)}}
		hdr := make([]byte, h.Len())
		h.Encode(hdr)
		tail := []byte{0, 0, 0, 0} // no pad (size is a multiple of 4), the ICRC left out
		pay := l.buf[i*size : (i+1)*size]
		m.Loans = append(m.Loans, netio.Loan{From: l, Off: i * size, Iov: len(m.Iov) + 1})
		m.Iov = append(m.Iov, hdr, pay, tail)
		d := append(append(append([]byte{}, hdr...), pay...), tail...)
		want = append(want, d)
		m.N += len(d)
		m.SegSize = len(d)
	}
	return m, want
}

func newLender(n int) *testLender {
	l := &testLender{buf: make([]byte, n)}
	for i := range l.buf {
		l.buf[i] = byte(i*7 + i>>8)
	}
	return l
}

// readAll reads from c into msgs[:want], at most batch messages a read, until it has
// them all or 5 s pass.
func readAll(t *testing.T, c netio.Conn, msgs []netio.Message, want, batch int) int {
	t.Helper()
	got := 0
	for start := time.Now(); got < want; {
		n, err := c.ReadBatch(msgs[got:min(got+batch, want)])
		if err != nil {
			t.Fatal(err)
		}
		got += n
		if time.Since(start) > 5*time.Second {
			t.Fatalf("read %d of %d", got, want)
		}
	}
	return got
}

func rxMsgs(n int) []netio.Message {
	rd := make([]netio.Message, n)
	for i := range rd {
		rd[i].Buf = make([]byte, 8192)
	}
	return rd
}

// askLoans makes c's reader ask this process's senders for loans (a Conn starts with
// copies: netio.LoanTaker).
func askLoans(t *testing.T, c netio.Conn) {
	t.Helper()
	lt, ok := netio.AsLoanTaker(c)
	if !ok {
		t.Fatal("a same-host Conn takes no loans")
	}
	lt.PreferCopies(false)
}

// lentData is the datagram a message read holds: Buf's headers, the lent payload, Buf's
// pad and ICRC; or Buf alone when nothing was lent.
func lentData(m *netio.Message) []byte {
	if m.Lent == nil {
		return m.Buf[:m.N]
	}
	return append(append(append([]byte{}, m.Buf[:m.HeaderLen]...), m.Lent...), m.Buf[m.HeaderLen:m.N]...)
}

// TestSameHostLendsInProcess: between two devices of one process, an RC run whose
// payloads have loans crosses the ring as references. A reader that takes views gets
// each payload where the sender's memory holds it (the same bytes, not a copy), pinned
// once for the read and unpinned by ReleaseViews; a reader with a batch too small for
// the run gets the rest at its next reads, in order.
func TestSameHostLendsInProcess(t *testing.T) {
	a, b := pairedSameHost(t, false)
	askLoans(t, b)
	v, _ := netio.AsViewReader(b)
	v.LendViews()
	l := newLender(8 * 4096)
	m, want := lentRun(l, b.LocalAddr(), wire.RCWriteMiddle, 3, 4096)
	if _, err := a.WriteBatch([]netio.Message{m}); err != nil {
		t.Fatal(err)
	}
	rd := rxMsgs(8)
	readAll(t, b, rd, 3, 8)
	for i, m := range rd[:3] {
		if m.Lent == nil {
			t.Fatalf("datagram %d was copied, not lent", i)
		}
		if unsafe.SliceData(m.Lent) != &l.buf[i*4096] || len(m.Lent) != 4096 {
			t.Errorf("datagram %d: payload lent from elsewhere than the sender's memory", i)
		}
		if got := lentData(&m); !bytes.Equal(got, want[i]) {
			t.Errorf("datagram %d arrived as % x..., want % x...", i, got[:16], want[i][:16])
		}
		if m.HeaderLen != wire.BTHLen || !m.SameHost || m.View != nil {
			t.Errorf("datagram %d: header length %d, same host %v, view %v", i, m.HeaderLen, m.SameHost, m.View != nil)
		}
	}
	if p := l.pins.Load(); p != 1 {
		t.Errorf("%d pins while the read's payloads are lent, want one", p)
	}
	v.ReleaseViews()
	if p := l.pins.Load(); p != 0 {
		t.Errorf("%d pins after ReleaseViews", p)
	}

	// A batch of one: the record is read across three reads.
	m, want = lentRun(l, b.LocalAddr(), wire.RCWriteMiddle, 3, 4096)
	if _, err := a.WriteBatch([]netio.Message{m}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		readAll(t, b, rd, 1, 1)
		if got := lentData(&rd[0]); !bytes.Equal(got, want[i]) {
			t.Fatalf("read %d one at a time: % x..., want % x...", i, got[:16], want[i][:16])
		}
		v.ReleaseViews()
	}
	s, _ := netio.SameHostStatsOf(b)
	sa, _ := netio.SameHostStatsOf(a)
	if sa.LentTx != 6 || s.LentRx != 6 || s.Corrupt != 0 || s.Unlent != 0 {
		t.Errorf("lent tx %d rx %d, corrupt %d, unlent %d; want 6 6 0 0", sa.LentTx, s.LentRx, s.Corrupt, s.Unlent)
	}
	if p := l.pins.Load(); p != 0 {
		t.Errorf("%d pins left", p)
	}
}

// TestSameHostLentCopied: a reader that takes no views gets a lent datagram whole in its
// Buf, the memory unpinned before the read returns; a UC run is never lent (its WR
// completes as it is sent, and the sender may reuse the memory before the reader looks).
func TestSameHostLentCopied(t *testing.T) {
	a, b := pairedSameHost(t, false)
	askLoans(t, b)
	l := newLender(8 * 4096)
	m, want := lentRun(l, b.LocalAddr(), wire.RCWriteMiddle, 2, 4096)
	u, uwant := lentRun(l, b.LocalAddr(), wire.UCWriteMiddle, 2, 4096)
	if _, err := a.WriteBatch([]netio.Message{m, u}); err != nil {
		t.Fatal(err)
	}
	rd := rxMsgs(8)
	readAll(t, b, rd, 4, 8)
	want = append(want, uwant...)
	for i, m := range rd[:4] {
		if m.Lent != nil || !bytes.Equal(m.Buf[:m.N], want[i]) {
			t.Errorf("datagram %d: lent %v, % x..., want a copy of % x...", i, m.Lent != nil, m.Buf[:16], want[i][:16])
		}
	}
	if p := l.pins.Load(); p != 0 {
		t.Errorf("%d pins after a read that copied", p)
	}
	sa, _ := netio.SameHostStatsOf(a)
	if sa.LentTx != 2 {
		t.Errorf("%d datagrams lent, want the RC run's 2 (not the UC run's)", sa.LentTx)
	}
}

// TestSameHostLentGone: a loan whose memory was deregistered before the reader came is
// dropped and counted, and the pair carries what follows.
func TestSameHostLentGone(t *testing.T) {
	a, b := pairedSameHost(t, false)
	askLoans(t, b)
	v, _ := netio.AsViewReader(b)
	v.LendViews()
	gone, l := newLender(4*4096), newLender(4*4096)
	m, _ := lentRun(gone, b.LocalAddr(), wire.RCWriteMiddle, 2, 4096)
	if _, err := a.WriteBatch([]netio.Message{m}); err != nil {
		t.Fatal(err)
	}
	gone.dead.Store(true)
	m, want := lentRun(l, b.LocalAddr(), wire.RCWriteMiddle, 1, 4096)
	if _, err := a.WriteBatch([]netio.Message{m}); err != nil {
		t.Fatal(err)
	}
	rd := rxMsgs(8)
	readAll(t, b, rd, 1, 8)
	if got := lentData(&rd[0]); !bytes.Equal(got, want[0]) {
		t.Fatalf("the datagram after the lost ones: % x..., want % x...", got[:16], want[0][:16])
	}
	v.ReleaseViews()
	if s, _ := netio.SameHostStatsOf(b); s.Unlent != 2 || s.Corrupt != 0 {
		t.Errorf("unlent %d, corrupt %d; want 2, 0", s.Unlent, s.Corrupt)
	}
	if gone.pins.Load() != 0 || l.pins.Load() != 0 {
		t.Errorf("pins left: %d, %d", gone.pins.Load(), l.pins.Load())
	}
}

// TestSameHostLentForeign: a record of lent datagrams on a pair with another process is
// a hostile peer naming memory of ours: dropped and counted corrupt, nothing pinned or
// copied, and the pair's later datagrams arrive.
func TestSameHostLentForeign(t *testing.T) {
	a, b := pairedSameHost(t, false)
	askLoans(t, b) // before the pair turns foreign: a still lends into it
	if !netio.SameHostForeignPeer(b, a.LocalAddr()) {
		t.Fatal("no pair")
	}
	v, _ := netio.AsViewReader(b)
	v.LendViews()
	l := newLender(4 * 4096)
	m, _ := lentRun(l, b.LocalAddr(), wire.RCWriteMiddle, 2, 4096)
	plain := netio.Message{Buf: []byte("after the hostile record"), N: 24, Addr: b.LocalAddr()}
	if _, err := a.WriteBatch([]netio.Message{m, plain}); err != nil {
		t.Fatal(err)
	}
	rd := rxMsgs(8)
	readAll(t, b, rd, 1, 8)
	if rd[0].Lent != nil || string(rd[0].Buf[:rd[0].N]) != "after the hostile record" {
		t.Fatalf("read % x (lent %v), want the plain datagram", rd[0].Buf[:rd[0].N], rd[0].Lent != nil)
	}
	v.ReleaseViews()
	if s, _ := netio.SameHostStatsOf(b); s.Corrupt != 1 || s.LentRx != 0 {
		t.Errorf("corrupt %d, lent rx %d; want 1, 0", s.Corrupt, s.LentRx)
	}
	if p := l.pins.Load(); p != 0 {
		t.Errorf("a foreign record pinned our memory: %d pins", p)
	}
}

// TestSameHostPreferCopies: a reader gets bytes its senders copied into the ring until it
// asks for loans (goverbs serve's loop, which does both ends' work on one thread), from
// pairs made before and after it asked, and bytes again when it asks for copies (the
// daemon's helper thread).
func TestSameHostPreferCopies(t *testing.T) {
	dir := rendezvousDir(t)
	a, b := pairedSameHostIn(t, dir, false)
	v, _ := netio.AsViewReader(b)
	v.LendViews()
	lt, _ := netio.AsLoanTaker(b)
	l := newLender(4 * 4096)
	rd := rxMsgs(8)
	send := func(c netio.Conn, lent bool) {
		t.Helper()
		m, want := lentRun(l, b.LocalAddr(), wire.RCWriteMiddle, 2, 4096)
		if _, err := c.WriteBatch([]netio.Message{m}); err != nil {
			t.Fatal(err)
		}
		readAll(t, b, rd, 2, 8)
		for i, m := range rd[:2] {
			if (m.Lent != nil) != lent || !bytes.Equal(lentData(&m), want[i]) {
				t.Fatalf("datagram %d: lent %v, want %v, and as sent", i, m.Lent != nil, lent)
			}
		}
		v.ReleaseViews()
	}
	send(a, false) // a Conn starts with copies
	askLoans(t, b)
	send(a, true)
	c := sameHost(t, "127.0.0.4:0", dir, netio.UDPOptions{}) // a pair made after the request
	if err := netio.SameHostConnect(c, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, b, 2)
	send(c, true)
	lt.PreferCopies(true)
	send(a, false)
	send(c, false)
}
