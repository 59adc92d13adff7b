package netio

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

func listen(t testing.TB, addr string, opts UDPOptions) Conn {
	t.Helper()
	c, err := ListenUDP(netip.MustParseAddrPort(addr), opts)
	if err != nil {
		if ap := netip.MustParseAddrPort(addr); ap.Addr().Is6() {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newMsgs(n, size int) []Message {
	ms := make([]Message, n)
	for i := range ms {
		ms[i].Buf = make([]byte, size)
	}
	return ms
}

// fill writes a recognisable pattern: datagram number then its bytes.
func pattern(b []byte, seq int) {
	for i := range b {
		b[i] = byte(seq*7 + i)
	}
	if len(b) >= 2 {
		b[0], b[1] = byte(seq>>8), byte(seq)
	}
}

// readN reads datagrams until want have arrived (splitting GRO runs) or the
// deadline passes, and returns them as separate byte slices.
func readN(t testing.TB, c Conn, want int, timeout time.Duration) (got [][]byte, from []netip.AddrPort) {
	t.Helper()
	ms := newMsgs(8, MaxGROSize)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < want {
			n, err := c.ReadBatch(ms)
			if err != nil {
				return
			}
			for i := range ms[:n] {
				ms[i].Segments(func(_ int, seg []byte) bool {
					got = append(got, bytes.Clone(seg))
					from = append(from, ms[i].Addr)
					return true
				})
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		c.Close()
		<-done
		t.Fatalf("got %d datagrams, want %d", len(got), want)
	}
	return got, from
}

// TestGSOSplit sends runs with SegSize and checks that a receiver without GRO
// gets separate datagrams of the right sizes, with GSO on and off.
func TestGSOSplit(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableGSO=%v", disable), func(t *testing.T) {
			a := listen(t, "127.0.0.2:0", UDPOptions{DisableGSO: disable})
			b := listen(t, "127.0.0.3:0", UDPOptions{DisableGRO: true})
			if disable && a.Caps().GSO {
				t.Fatal("GSO on although disabled")
			}
			// 200 segments of 1000 bytes + a 123-byte tail: more than one GSO send.
			const seg, segs = 1000, 200
			buf := make([]byte, seg*segs+123)
			for i := 0; i*seg < len(buf); i++ {
				pattern(buf[i*seg:min(len(buf), (i+1)*seg)], i)
			}
			ms := []Message{
				{Buf: buf, N: len(buf), Addr: b.LocalAddr(), SegSize: seg},
				{Buf: []byte("single"), N: 6, Addr: b.LocalAddr()},
			}
			if n, err := a.WriteBatch(ms); n != 2 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got, _ := readN(t, b, segs+2, 5*time.Second)
			for i := range segs + 1 {
				want := buf[i*seg : min(len(buf), (i+1)*seg)]
				if !bytes.Equal(got[i], want) {
					t.Fatalf("segment %d: %d bytes, want %d", i, len(got[i]), len(want))
				}
			}
			if string(got[segs+1]) != "single" {
				t.Fatalf("last datagram %q", got[segs+1])
			}
		})
	}
}

// TestGRO sends GSO runs to a receiver with GRO and checks that coalesced
// messages split back into the sent datagrams.
func TestGRO(t *testing.T) {
	a := listen(t, "127.0.0.2:0", UDPOptions{})
	b := listen(t, "127.0.0.3:0", UDPOptions{})
	if !b.Caps().GRO {
		t.Skip("no UDP GRO")
	}
	const seg, segs = 1400, 40
	buf := make([]byte, seg*segs-7)
	for i := 0; i*seg < len(buf); i++ {
		pattern(buf[i*seg:min(len(buf), (i+1)*seg)], i)
	}
	if _, err := a.WriteBatch([]Message{{Buf: buf, N: len(buf), Addr: b.LocalAddr(), SegSize: seg}}); err != nil {
		t.Fatal(err)
	}
	ms := newMsgs(4, MaxGROSize)
	var got [][]byte
	coalesced := false
	for len(got) < segs {
		n, err := b.ReadBatch(ms)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ms[:n] {
			if ms[i].SegSize > 0 {
				coalesced = true
				if ms[i].SegSize != seg {
					t.Fatalf("SegSize %d, want %d", ms[i].SegSize, seg)
				}
			}
			ms[i].Segments(func(_ int, s []byte) bool { got = append(got, bytes.Clone(s)); return true })
		}
	}
	for i := range got {
		if !bytes.Equal(got[i], buf[i*seg:min(len(buf), (i+1)*seg)]) {
			t.Fatalf("segment %d differs", i)
		}
	}
	t.Logf("GSO=%v coalesced=%v", a.Caps().GSO, coalesced)
	if a.Caps().GSO && !coalesced {
		t.Error("GSO send to a GRO receiver was not coalesced")
	}
}

// TestGROSmallBuffers: a run coalesced before the reader showed its buffer
// size is cut to the whole segments that fit; the small buffers then turn GRO
// off so later runs arrive as separate datagrams.
func TestGROSmallBuffers(t *testing.T) {
	a := listen(t, "127.0.0.2:0", UDPOptions{})
	b := listen(t, "127.0.0.3:0", UDPOptions{})
	if !a.Caps().GSO || !b.Caps().GRO {
		t.Skip("needs GSO and GRO")
	}
	const seg, segs = 1000, 10
	buf := make([]byte, seg*segs)
	send := func() {
		if _, err := a.WriteBatch([]Message{{Buf: buf, N: len(buf), Addr: b.LocalAddr(), SegSize: seg}}); err != nil {
			t.Fatal(err)
		}
	}
	send()
	ms := newMsgs(8, 2500)
	n, err := b.ReadBatch(ms)
	if err != nil || n != 1 || ms[0].N != 2*seg || ms[0].SegSize != seg {
		t.Fatalf("truncated run: n=%d err=%v N=%d SegSize=%d", n, err, ms[0].N, ms[0].SegSize)
	}
	if b.Caps().GRO {
		t.Fatal("GRO still on after a read with small buffers")
	}
	send()
	for total := 0; total < seg*segs; {
		n, err := b.ReadBatch(ms)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ms[:n] {
			if ms[i].N != seg || ms[i].SegSize != 0 {
				t.Fatalf("N=%d SegSize=%d", ms[i].N, ms[i].SegSize)
			}
			total += ms[i].N
		}
	}
}

func TestBusyPollRead(t *testing.T) {
	a := listen(t, "127.0.0.2:0", UDPOptions{})
	b := listen(t, "127.0.0.3:0", UDPOptions{BusyPoll: true})
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.WriteBatch([]Message{{Buf: []byte("hello"), N: 5, Addr: b.LocalAddr()}})
	}()
	got, _ := readN(t, b, 1, 5*time.Second)
	if string(got[0]) != "hello" {
		t.Fatalf("%q", got[0])
	}
}

// TestWriteErrorsSkipped: datagrams the kernel refuses are skipped, the
// others still go out, and the first failure is reported.
func TestWriteErrorsSkipped(t *testing.T) {
	a := listen(t, "127.0.0.2:0", UDPOptions{})
	b := listen(t, "127.0.0.3:0", UDPOptions{DisableGRO: true})
	big := make([]byte, 70000) // larger than any UDP datagram: EMSGSIZE
	ms := []Message{
		{Buf: []byte("one"), N: 3, Addr: b.LocalAddr()},
		{Buf: big, N: len(big), Addr: b.LocalAddr()},
		{Buf: []byte("v6"), N: 2, Addr: netip.MustParseAddrPort("[::1]:4791")},
		{Buf: []byte("two"), N: 3, Addr: b.LocalAddr()},
	}
	n, err := a.WriteBatch(ms)
	var se *SendError
	if n != len(ms) || !errors.As(err, &se) {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if se.Index != 1 || se.Skipped != 2 {
		t.Errorf("SendError %+v", se)
	}
	got, _ := readN(t, b, 2, 5*time.Second)
	if string(got[0]) != "one" || string(got[1]) != "two" {
		t.Fatalf("got %q", got)
	}
}

// TestBusyPollSocket: a busy-poll Conn is a socket outside Go's netpoller (spinFD). It
// must bind like any other (a kernel-chosen port, IPv4 and IPv6), carry GSO runs both
// ways, report readability through WaitReadable, and let Close unblock a waiter.
func TestBusyPollSocket(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"ipv4", "127.0.0.2:0", "127.0.0.3:0"},
		{"ipv6", "[::1]:0", "[::1]:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy := listen(t, tc.a, UDPOptions{BusyPoll: true})
			plain := listen(t, tc.b, UDPOptions{})
			if busy.LocalAddr().Port() == 0 || busy.LocalAddr().Addr() != netip.MustParseAddrPort(tc.a).Addr() {
				t.Fatalf("LocalAddr %v", busy.LocalAddr())
			}
			p, ok := AsPoller(busy)
			if !ok {
				t.Fatal("busy-poll Conn is not a Poller")
			}
			if n, err := p.PollBatch(newMsgs(4, MaxGROSize)); n != 0 || err != nil {
				t.Fatalf("PollBatch on an idle socket = %d, %v", n, err)
			}
			if ready, err := p.WaitReadable(5 * time.Millisecond); ready || err != nil {
				t.Fatalf("WaitReadable on an idle socket = %v, %v", ready, err)
			}
			// A GSO run of 8 datagrams each way.
			const segs, size = 8, 1000
			run := make([]byte, segs*size)
			for i := range segs {
				pattern(run[i*size:(i+1)*size], i)
			}
			if _, err := plain.WriteBatch([]Message{{Buf: run, N: len(run), SegSize: size, Addr: busy.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			if ready, err := p.WaitReadable(-1); !ready || err != nil {
				t.Fatalf("WaitReadable = %v, %v", ready, err)
			}
			got, from := readN(t, busy, segs, 5*time.Second)
			for i, g := range got {
				if !bytes.Equal(g, run[i*size:(i+1)*size]) || from[i] != plain.SourceAddr() {
					t.Fatalf("datagram %d from %v differs", i, from[i])
				}
			}
			if _, err := busy.WriteBatch([]Message{{Buf: run, N: len(run), SegSize: size, Addr: plain.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			got, _ = readN(t, plain, segs, 5*time.Second)
			for i, g := range got {
				if !bytes.Equal(g, run[i*size:(i+1)*size]) {
					t.Fatalf("datagram %d differs on the way back", i)
				}
			}
			errc := make(chan error, 1)
			go func() {
				_, err := p.WaitReadable(-1)
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			if err := busy.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("WaitReadable after Close: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not unblock WaitReadable")
			}
			if _, err := p.PollBatch(newMsgs(1, 10)); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("PollBatch after Close: %v", err)
			}
			if err := busy.Close(); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

// TestGatherIov: a Message that gathers its data from Iov slices arrives as if it had
// been one buffer, whether WriteBatch sends its run with GSO or splits it into datagrams,
// and whatever the slices' boundaries are relative to the segments'.
func TestGatherIov(t *testing.T) {
	for _, noGSO := range []bool{false, true} {
		t.Run(fmt.Sprintf("DisableGSO=%v", noGSO), func(t *testing.T) {
			a := listen(t, "127.0.0.2:0", UDPOptions{DisableGSO: noGSO})
			b := listen(t, "127.0.0.3:0", UDPOptions{})
			const segs, size = 6, 1000
			run := make([]byte, segs*size)
			for i := range segs {
				pattern(run[i*size:(i+1)*size], i)
			}
			// Pieces that straddle segment boundaries, one byte long, and empty.
			var iov [][]byte
			for _, cut := range []int{7, 1000, 1001, 1001, 2500, 2500, 5999, 6000} {
				prev := 0
				for _, v := range iov {
					prev += len(v)
				}
				iov = append(iov, run[prev:cut])
			}
			single := [][]byte{[]byte("gat"), nil, []byte("her")}
			tooMany := make([][]byte, MaxIov+1)
			ms := []Message{
				{Iov: iov, N: len(run), SegSize: size, Addr: b.LocalAddr()},
				{Iov: tooMany, N: 0, Addr: b.LocalAddr()},
				{Iov: single, N: 6, Addr: b.LocalAddr()},
			}
			n, err := a.WriteBatch(ms)
			var se *SendError
			if n != len(ms) || !errors.As(err, &se) || se.Index != 1 || !errors.Is(se.Err, ErrTooManyIov) {
				t.Fatalf("WriteBatch = %d, %v; want the Iov-overflowing message refused", n, err)
			}
			got, _ := readN(t, b, segs+1, 5*time.Second)
			for i := range segs {
				if !bytes.Equal(got[i], run[i*size:(i+1)*size]) {
					t.Fatalf("segment %d differs (%d bytes)", i, len(got[i]))
				}
			}
			if string(got[segs]) != "gather" {
				t.Fatalf("gathered datagram %q", got[segs])
			}
		})
	}
}

// TestInterfaceOf: an address configured on an interface names it; an address on none
// does not.
func TestInterfaceOf(t *testing.T) {
	ifi, ok := InterfaceOf(netip.MustParseAddr("127.0.0.1"))
	if !ok || ifi.Flags&net.FlagLoopback == 0 {
		t.Fatalf("127.0.0.1: %+v %v, want the loopback interface", ifi, ok)
	}
	if ifi, ok := InterfaceOf(netip.MustParseAddr("::ffff:127.0.0.1")); !ok || ifi.Flags&net.FlagLoopback == 0 {
		t.Fatalf("::ffff:127.0.0.1: %+v %v, want the loopback interface (IPv4-mapped)", ifi, ok)
	}
	if _, ok := InterfaceOf(netip.MustParseAddr("192.0.2.77")); ok {
		t.Fatal("192.0.2.77 (TEST-NET-1, configured nowhere) named an interface")
	}
}
