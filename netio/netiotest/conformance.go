package netiotest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/netio"
)

// MakePair returns two fresh Conns of the backend under test such that a datagram
// written by one to the other's LocalAddr arrives there. It is called once per subtest;
// the suite closes both Conns when the subtest ends (MakePair may register cleanups of
// its own, for a network for example).
type MakePair func(t *testing.T) (a, b netio.Conn)

// TestConn runs the conformance suite on a netio backend: what the engine relies on from
// every netio.Conn. Each subtest makes a fresh pair with makePair and asserts, from a to
// b:
//
//   - Addresses: datagrams arrive from the sender's SourceAddr, which has LocalAddr's IP.
//   - Batch: a write of more messages than BatchSize delivers each datagram once, byte for
//     byte; reads fill at most len(msgs) messages, into the caller's buffers (no buffer is
//     replaced), and a sender may reuse its buffers as soon as WriteBatch returns.
//   - Runs: a Message with SegSize arrives as the datagrams it was sent as, whether the
//     Conn sends it with GSO or splits it, also longer than one GSO send and gathered
//     from Iov slices; a receiver reports SegSize > 0 only when its Caps say GRO.
//   - Caps: honest limits: without GSO, one segment per send and no byte budget; with it,
//     limits a sender can size runs by; without GRO, no GRO buffer size.
//   - Truncation: a datagram longer than the read buffer is cut to it (or dropped), and
//     the next datagram is whole.
//   - EmptyBatch: ReadBatch and WriteBatch of no messages return 0 at once.
//   - Close: Close unblocks a blocked ReadBatch (and a Poller's WaitReadable) with an
//     error satisfying errors.Is(err, net.ErrClosed), and later reads and writes fail so.
//   - Poller (when netio.AsPoller finds one): PollBatch never waits, WaitReadable reports
//     a queued datagram and times out on an idle Conn.
//   - Concurrent: writers on several goroutines at once while the reader reads.
//   - ECN (when both Caps say ECN): every datagram arrives with the ECN codepoint it was
//     written with, each of the four, also every segment of a run.
func TestConn(t *testing.T, makePair MakePair) {
	t.Helper()
	for _, st := range []struct {
		name string
		fn   func(t *testing.T, a, b netio.Conn)
	}{
		{"Addresses", testAddresses},
		{"Batch", testBatch},
		{"Runs", testRuns},
		{"Caps", testCaps},
		{"Truncation", testTruncation},
		{"EmptyBatch", testEmptyBatch},
		{"Close", testClose},
		{"Poller", testPoller},
		{"Concurrent", testConcurrent},
		{"ECN", testECN},
	} {
		t.Run(st.name, func(t *testing.T) {
			a, b := makePair(t)
			defer a.Close()
			defer b.Close()
			st.fn(t, a, b)
		})
	}
}

// timeout bounds every wait of the suite; a conforming backend on loopback or in memory
// takes microseconds.
const timeout = 5 * time.Second

// datagram numbers a test datagram: its first 4 bytes are seq, then a pattern of seq.
func datagram(seq, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(seq*7 + i)
	}
	if size >= 4 {
		binary.BigEndian.PutUint32(b, uint32(seq))
	}
	return b
}

// received is one datagram as the reader saw it.
type received struct {
	data    []byte
	from    netip.AddrPort
	segSize int // of the message it came in
	ecn     netio.ECN
}

// readDatagrams reads from c until want datagrams have arrived (splitting runs into
// their segments) and returns them; it fails the test after timeout. Buffers are
// bufSize bytes, batchLen messages a call; every call checks that the Conn filled the
// caller's buffers rather than replacing them.
func readDatagrams(t *testing.T, c netio.Conn, want, batchLen, bufSize int) []received {
	t.Helper()
	msgs := make([]netio.Message, batchLen)
	bases := make([]*byte, batchLen)
	for i := range msgs {
		msgs[i].Buf = make([]byte, bufSize)
		bases[i] = unsafe.SliceData(msgs[i].Buf)
	}
	var got []received
	var failure string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < want {
			n, err := c.ReadBatch(msgs)
			if err != nil {
				failure = "ReadBatch: " + err.Error()
				return
			}
			if n < 1 || n > len(msgs) {
				failure = "ReadBatch returned a count outside 1..len(msgs)"
				return
			}
			for i := range msgs[:n] {
				m := &msgs[i]
				if unsafe.SliceData(m.Buf) != bases[i] || len(m.Buf) != bufSize {
					failure = "ReadBatch replaced a caller's buffer"
					return
				}
				if m.N < 0 || m.N > len(m.Buf) {
					failure = "ReadBatch set N outside the buffer"
					return
				}
				m.Segments(func(_ int, seg []byte) bool {
					got = append(got, received{bytes.Clone(seg), m.Addr, m.SegSize, m.ECN})
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
		t.Fatalf("received %d datagrams of %d in %v", len(got), want, timeout)
	}
	if failure != "" {
		t.Fatal(failure)
	}
	return got
}

func testAddresses(t *testing.T, a, b netio.Conn) {
	for _, c := range []netio.Conn{a, b} {
		if !c.LocalAddr().IsValid() || c.LocalAddr().Port() == 0 {
			t.Fatalf("LocalAddr %v", c.LocalAddr())
		}
		if src := c.SourceAddr(); src.Addr() != c.LocalAddr().Addr() || src.Port() == 0 {
			t.Fatalf("SourceAddr %v for LocalAddr %v: a sender computes the ICRC with it", src, c.LocalAddr())
		}
	}
	for _, dir := range []struct{ from, to netio.Conn }{{a, b}, {b, a}} {
		if n, err := dir.from.WriteBatch([]netio.Message{{Buf: []byte("hello"), N: 5, Addr: dir.to.LocalAddr()}}); n != 1 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		got := readDatagrams(t, dir.to, 1, 1, 2048)
		if string(got[0].data) != "hello" || got[0].from != dir.from.SourceAddr() {
			t.Fatalf("received %q from %v, want \"hello\" from %v", got[0].data, got[0].from, dir.from.SourceAddr())
		}
	}
}

func testBatch(t *testing.T, a, b netio.Conn) {
	count := min(2*a.Caps().BatchSize+3, 200)
	msgs := make([]netio.Message, count)
	want := make([][]byte, count)
	for i := range msgs {
		want[i] = datagram(i, 16+i*5)
		msgs[i] = netio.Message{Buf: bytes.Clone(want[i]), N: len(want[i]), Addr: b.LocalAddr()}
	}
	if n, err := a.WriteBatch(msgs); n != count || err != nil {
		t.Fatalf("WriteBatch of %d = %d, %v", count, n, err)
	}
	for i := range msgs {
		if !bytes.Equal(msgs[i].Buf, want[i]) {
			t.Fatalf("WriteBatch changed message %d's buffer", i)
		}
		clear(msgs[i].Buf) // the sender's to reuse now
	}
	batch := max(1, b.Caps().BatchSize/2) // fewer than the Conn could fill
	checkOnce(t, readDatagrams(t, b, count, batch, 2048), want)
}

// checkOnce checks that got holds each of want exactly once, in any order (datagrams
// carry their index in their first 4 bytes).
func checkOnce(t *testing.T, got []received, want [][]byte) {
	t.Helper()
	seen := make([]bool, len(want))
	for _, g := range got {
		if len(g.data) < 4 {
			t.Fatalf("a datagram of %d bytes was never sent", len(g.data))
		}
		i := int(binary.BigEndian.Uint32(g.data))
		if i >= len(want) || seen[i] {
			t.Fatalf("datagram %d arrived twice or was never sent", i)
		}
		if !bytes.Equal(g.data, want[i]) {
			t.Fatalf("datagram %d: %d bytes, differ from the %d sent", i, len(g.data), len(want[i]))
		}
		seen[i] = true
	}
}

func testRuns(t *testing.T, a, b netio.Conn) {
	gro := b.Caps().GRO
	bufSize := max(2048, b.Caps().GROBufSize)
	// Runs of 1000-byte segments: with a short last segment; longer than one GSO send
	// (any budget under 100 KB); gathered from slices that straddle segment boundaries.
	var want [][]byte
	run := func(segs, last int) []byte {
		var r []byte
		for i := range segs {
			size := 1000
			if i == segs-1 && last > 0 {
				size = last
			}
			d := datagram(len(want), size)
			want = append(want, d)
			r = append(r, d...)
		}
		return r
	}
	short := run(5, 123)
	long := run(100, 0)
	gathered := run(6, 0)
	var iov [][]byte
	for prev, cut := 0, 0; prev < len(gathered); prev = cut {
		cut = min(len(gathered), prev+[]int{7, 993, 1, 0, 2500, 1499}[len(iov)%6])
		iov = append(iov, gathered[prev:cut])
	}
	msgs := []netio.Message{
		{Buf: short, N: len(short), SegSize: 1000, Addr: b.LocalAddr()},
		{Buf: long, N: len(long), SegSize: 1000, Addr: b.LocalAddr()},
		{Iov: iov, N: len(gathered), SegSize: 1000, Addr: b.LocalAddr()},
	}
	if n, err := a.WriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readDatagrams(t, b, len(want), 8, bufSize)
	if len(got) != len(want) {
		t.Fatalf("%d datagrams, want %d", len(got), len(want))
	}
	checkOnce(t, got, want)
	for _, g := range got {
		if g.segSize > 0 && !gro {
			t.Fatalf("a coalesced run (SegSize %d) from a Conn whose Caps say no GRO", g.segSize)
		}
	}
}

func testCaps(t *testing.T, a, b netio.Conn) {
	for _, c := range []netio.Conn{a, b} {
		caps := c.Caps()
		if caps.BatchSize < 1 {
			t.Errorf("BatchSize %d", caps.BatchSize)
		}
		if caps.GSO {
			if caps.MaxSegments < 2 || caps.MaxSegments > netio.MaxGSOSegments || caps.MaxGSOBytes < 2*1024 || caps.MaxGSOBytes > 65535-8 {
				t.Errorf("GSO with MaxSegments %d, MaxGSOBytes %d", caps.MaxSegments, caps.MaxGSOBytes)
			}
		} else if caps.MaxSegments != 1 || caps.MaxGSOBytes != 0 {
			t.Errorf("no GSO, yet MaxSegments %d, MaxGSOBytes %d", caps.MaxSegments, caps.MaxGSOBytes)
		}
		if caps.GRO != (caps.GROBufSize > 0) || caps.GRO && caps.GROBufSize < 1<<15 {
			t.Errorf("GRO %v with GROBufSize %d", caps.GRO, caps.GROBufSize)
		}
		if caps.RecvBuf < 0 || caps.SendBuf < 0 {
			t.Errorf("buffer sizes %d, %d", caps.RecvBuf, caps.SendBuf)
		}
	}
}

func testTruncation(t *testing.T, a, b netio.Conn) {
	long, next := datagram(0, 1500), datagram(1, 100)
	msgs := []netio.Message{
		{Buf: long, N: len(long), Addr: b.LocalAddr()},
		{Buf: next, N: len(next), Addr: b.LocalAddr()},
	}
	if _, err := a.WriteBatch(msgs); err != nil {
		t.Fatal(err)
	}
	// The long one is cut to the buffer, or dropped where the OS gives no sender with
	// what fitted (Windows); either way the next one arrives whole.
	got := readDatagrams(t, b, 1, 1, 256)
	if len(got[0].data) == 256 {
		if !bytes.Equal(got[0].data, long[:256]) {
			t.Fatal("a 1500-byte datagram read into 256 bytes: not its first 256")
		}
		got = readDatagrams(t, b, 1, 1, 256)
	}
	if !bytes.Equal(got[0].data, next) {
		t.Fatalf("the datagram after a truncated one: %d bytes, want %d", len(got[0].data), len(next))
	}
}

func testEmptyBatch(t *testing.T, a, b netio.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, err := b.ReadBatch(nil); n != 0 || err != nil {
			t.Errorf("ReadBatch(nil) = %d, %v", n, err)
		}
		if n, err := a.WriteBatch(nil); n != 0 || err != nil {
			t.Errorf("WriteBatch(nil) = %d, %v", n, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatal("ReadBatch or WriteBatch of no messages blocked")
	}
}

func testClose(t *testing.T, a, b netio.Conn) {
	p, poller := netio.AsPoller(b)
	errc := make(chan error, 2)
	go func() {
		_, err := b.ReadBatch([]netio.Message{{Buf: make([]byte, 2048)}})
		errc <- err
	}()
	if poller {
		go func() {
			_, err := p.WaitReadable(-1)
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond) // let them block
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range map[bool]int{false: 1, true: 2}[poller] {
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("blocked read after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(timeout):
			t.Fatal("Close did not unblock a blocked reader")
		}
	}
	buf := []netio.Message{{Buf: make([]byte, 64)}}
	if _, err := b.ReadBatch(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadBatch after Close: %v", err)
	}
	if _, err := b.WriteBatch([]netio.Message{{Buf: []byte("x"), N: 1, Addr: a.LocalAddr()}}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteBatch after Close: %v", err)
	}
	if poller {
		if _, err := p.PollBatch(buf); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("PollBatch after Close: %v", err)
		}
	}
	if err := b.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func testPoller(t *testing.T, a, b netio.Conn) {
	p, ok := netio.AsPoller(b)
	if !ok {
		t.Skip("not a netio.Poller")
	}
	msgs := []netio.Message{{Buf: make([]byte, 2048)}, {Buf: make([]byte, 2048)}}
	if n, err := p.PollBatch(msgs); n != 0 || err != nil {
		t.Fatalf("PollBatch on an idle Conn = %d, %v", n, err)
	}
	if ready, err := p.WaitReadable(time.Millisecond); ready || err != nil {
		t.Fatalf("WaitReadable on an idle Conn = %v, %v", ready, err)
	}
	if _, err := a.WriteBatch([]netio.Message{{Buf: []byte("poll"), N: 4, Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if ready, err := p.WaitReadable(timeout); !ready || err != nil {
		t.Fatalf("WaitReadable with a datagram sent = %v, %v", ready, err)
	}
	n, err := p.PollBatch(msgs)
	if n != 1 || err != nil || string(msgs[0].Buf[:msgs[0].N]) != "poll" {
		t.Fatalf("PollBatch = %d, %v", n, err)
	}
}

func testConcurrent(t *testing.T, a, b netio.Conn) {
	const writers, per = 4, 40
	want := make([][]byte, writers*per)
	for i := range want {
		want[i] = datagram(i, 64)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w * per; i < (w+1)*per; i += 4 {
				msgs := make([]netio.Message, 4)
				for j := range msgs {
					msgs[j] = netio.Message{Buf: want[i+j], N: len(want[i+j]), Addr: b.LocalAddr()}
				}
				if _, err := a.WriteBatch(msgs); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	got := readDatagrams(t, b, len(want), 16, 2048) // while they write
	wg.Wait()
	checkOnce(t, got, want)
}

func testECN(t *testing.T, a, b netio.Conn) {
	if !a.Caps().ECN || !b.Caps().ECN {
		t.Skip("no ECN in Caps")
	}
	codes := []netio.ECN{netio.ECNNotECT, netio.ECNECT0, netio.ECNECT1, netio.ECNCE}
	var msgs []netio.Message
	for i, e := range codes {
		d := datagram(i, 200+i)
		msgs = append(msgs, netio.Message{Buf: d, N: len(d), Addr: b.LocalAddr(), ECN: e})
	}
	// A run: every segment leaves with the run's codepoint.
	run := append(datagram(4, 300), datagram(5, 300)...)
	msgs = append(msgs, netio.Message{Buf: run, N: len(run), SegSize: 300, Addr: b.LocalAddr(), ECN: netio.ECNCE})
	if n, err := a.WriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := readDatagrams(t, b, 6, 8, max(2048, b.Caps().GROBufSize))
	want := append(codes, netio.ECNCE, netio.ECNCE)
	for _, r := range got {
		if len(r.data) < 4 {
			t.Fatalf("short datagram of %d bytes", len(r.data))
		}
		seq := int(binary.BigEndian.Uint32(r.data))
		if seq >= len(want) {
			t.Fatalf("datagram %d not sent", seq)
		}
		if r.ecn != want[seq] {
			t.Errorf("datagram %d arrived %v, sent %v", seq, r.ecn, want[seq])
		}
	}
}
