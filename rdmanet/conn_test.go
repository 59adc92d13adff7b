package rdmanet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

func pair(t *testing.T) (a, b *Conn) {
	t.Helper()
	return pairSized(t, ringSize, msgCredits)
}

// pairSized is pair with rings of ring bytes and credits message credits.
func pairSized(t *testing.T, ring, credits int) (a, b *Conn) {
	t.Helper()
	da, db := testDevices(t)
	a, b, err := testPairSized(t, da, db, ring, credits)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
		<-a.tornDown
		<-b.tornDown
	})
	return a, b
}

// A reader much slower than the writer gets every byte in order, the writer is held
// back by credits (never more than a ring in flight) and no RNR NAK is ever sent.
func TestSlowReaderGetsEverythingWithoutRNR(t *testing.T) {
	a, b := pair(t)
	want := make([]byte, 6*ringSize+12345)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	errc := make(chan error, 1)
	go func() {
		// Many sizes, from single bytes to several rings in one call.
		p := want
		for len(p) > 0 {
			n := min(len(p), []int{1, 7, 4096, 70000, 3 * ringSize}[rand.IntN(5)])
			if _, err := a.Write(p[:n]); err != nil {
				errc <- err
				return
			}
			p = p[n:]
		}
		errc <- a.CloseWrite()
	}()
	var got bytes.Buffer
	buf := make([]byte, 50000)
	for i := 0; ; i++ {
		if i%8 == 0 {
			time.Sleep(time.Millisecond) // slow
		}
		n, err := b.Read(buf[:1+rand.IntN(len(buf))])
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		given := b.rxGranted - b.rxHead
		b.mu.Unlock()
		if given > ringSize {
			t.Fatalf("%d bytes given to the writer and not read, more than the ring's %d", given, ringSize)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, not the %d written", got.Len(), len(want))
	}
	for _, c := range []*Conn{a, b} {
		if k := c.ep.qp.Counters(); k.RNRNakSent+k.RNRNakReceived != 0 {
			t.Errorf("RNR NAKs: %+v", k)
		}
	}
}

// After CloseWrite the peer reads what was written, then io.EOF, and can still answer.
func TestCloseWriteHalfCloses(t *testing.T) {
	a, b := pair(t)
	if _, err := a.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := a.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Fatal("Write after CloseWrite succeeded")
	}
	req, err := io.ReadAll(b)
	if err != nil || string(req) != "request" {
		t.Fatalf("ReadAll = %q, %v", req, err)
	}
	if _, err := b.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	resp, err := io.ReadAll(a)
	if err != nil || string(resp) != "response" {
		t.Fatalf("ReadAll = %q, %v", resp, err)
	}
}

// A peer's Close ends the stream for the reader and fails the writer.
func TestPeerCloseFailsWrites(t *testing.T) {
	a, b := pair(t)
	b.Close()
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for err == nil && time.Now().Before(deadline) {
		_, err = a.Write(make([]byte, 1000))
	}
	if !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("Write to a closed peer: %v, want ErrPeerClosed", err)
	}
	if n, err := a.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read from a closed peer: %d, %v; want io.EOF", n, err)
	}
}

// Deadlines fail with os.ErrDeadlineExceeded as a net.Error whose Timeout is true,
// and a blocked Write returns what it wrote before: a ring's worth, here a small ring
// (filling a full one can outlast the deadline under the race detector), with a
// deadline a loaded 2-core -race run fills 64 KiB well within.
func TestWriteDeadlineReportsPartialWrite(t *testing.T) {
	const ring = 64 << 10
	a, _ := pairSized(t, ring, msgCredits)
	a.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	n, err := a.Write(make([]byte, 3*ring))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write past the deadline: %v", err)
	}
	if n != ring {
		t.Fatalf("wrote %d bytes before the deadline, want a ring's %d", n, ring)
	}
}

// Closing releases everything: the completion goroutine ends and the QP is gone.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	da, db := testDevices(t)
	// A first connection before counting: two devices of one host that have talked keep
	// a goroutine each for their same-host pair's lifeline (netio.ListenSameHost) as long
	// as both are open, which is the devices' state, not the connections'.
	if a, b, err := testPair(t, da, db); err == nil {
		a.Close()
		b.Close()
		<-a.tornDown
		<-b.tornDown
	}
	before := runtime.NumGoroutine()
	for range 5 {
		a, b, err := testPair(t, da, db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b.Close()
		<-a.tornDown
		<-b.tornDown
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after closing, %d before", n, before)
	}
}

func TestParseConnDataRejectsBadInput(t *testing.T) {
	want := connData{flags: connFlagNet, credits: msgCredits,
		targetSGL: sge{addr: 0x2000, key: 9, length: sglEntries},
		dataBuf:   sge{addr: 0x1000, key: 7, length: ringSize / 2}}
	good := want.marshal(nil)
	if d, err := parseConnData(append(good, 0, 0, 0)); err != nil || d != want {
		t.Fatalf("parseConnData(good + padding) = %+v, %v", d, err)
	}
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for name, b := range map[string][]byte{
		"short":         good[:connLen-1],
		"empty":         nil,
		"version 0":     mod(func(b []byte) { b[0] = 0 }),
		"version 2":     mod(func(b []byte) { b[0] = 2 }),
		"no credits":    mod(func(b []byte) { b[2], b[3] = 0, 0 }),
		"65535 credits": mod(func(b []byte) { b[2], b[3] = 0xff, 0xff }),
		"empty SGL":     mod(func(b []byte) { clear(b[20:24]) }),
		"huge SGL":      mod(func(b []byte) { b[20] = 1 }),
		"SGL wraps":     mod(func(b []byte) { copy(b[8:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}) }),
		"no buffer":     mod(func(b []byte) { clear(b[36:40]) }),
		"buffer wraps":  mod(func(b []byte) { copy(b[24:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}) }),
	} {
		if _, err := parseConnData(b); !errors.Is(err, errConnData) {
			t.Errorf("%s: parseConnData = %v, want errConnData", name, err)
		}
	}
}

// rs_conn_data laid out as rsockets' rs_format_conn_data writes it on a little-endian
// host with its defaults: version 1, flags IOMAP, 384 credits, no iomap, a 2-entry
// target SGL, 64 KiB (half of 128 KiB) of data buffer, every field big-endian.
func TestParseConnDataFromRsockets(t *testing.T) {
	b := []byte{1, connFlagIOMap, 0x01, 0x80, 0, 0, 0, 0,
		0x00, 0x00, 0x55, 0x55, 0x66, 0x77, 0x80, 0x00, 0x00, 0x00, 0x01, 0x23, 0x00, 0x00, 0x00, 0x02,
		0x00, 0x00, 0x7f, 0x00, 0x11, 0x22, 0x30, 0x00, 0x00, 0x00, 0x04, 0x56, 0x00, 0x01, 0x00, 0x00}
	d, err := parseConnData(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.credits != 384 || d.targetSGL != (sge{0x555566778000, 0x123, 2}) ||
		d.dataBuf != (sge{0x7f0011223000, 0x456, 64 << 10}) || d.order() != binary.LittleEndian {
		t.Fatalf("parsed %+v", d)
	}
}

func TestImmediateRoundTrip(t *testing.T) {
	for _, o := range []op{opData, opSGL, opIOMapSGL, opCtrl} {
		for _, v := range []uint32{0, 1, ringSize, immValMask} {
			if imm := msgImm(o, v); immOp(imm) != o || immVal(imm) != v {
				t.Errorf("op %d value %d: %#x", o, v, imm)
			}
		}
	}
	// The wire values are rsockets': op in bits 31..29.
	if msgImm(opCtrl, ctrlShutdown) != 0xe0000002 || msgImm(opSGL, 0x180) != 0x80000180 {
		t.Errorf("control SHUTDOWN %#x, SGL 384 %#x", msgImm(opCtrl, ctrlShutdown), msgImm(opSGL, 0x180))
	}
	for _, o := range []binary.ByteOrder{binary.BigEndian, binary.LittleEndian} {
		var b [sgeLen]byte
		s := sge{addr: 0x0102030405060708, key: 0x0a0b0c0d, length: 0x10000}
		putSGE(b[:], s, o)
		if getSGE(b[:], o) != s || o.Uint32(b[12:]) != 0x10000 {
			t.Errorf("%v: %x", o, b)
		}
	}
}

// A peer that vanishes mid-stream (its device gone, as when its process is killed)
// fails the writer once the transport's retries run out: nothing waits forever.
func TestPeerKilledFailsWriter(t *testing.T) {
	da, db := testDevices(t)
	a, b, err := testPair(t, da, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close(); <-a.tornDown })
	if _, err := a.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	start := time.Now()
	for err == nil && time.Since(start) < 20*time.Second {
		_, err = a.Write(make([]byte, 4096))
	}
	if err == nil || errors.Is(err, ErrPeerClosed) {
		t.Fatalf("Write to a killed peer: %v after %v, want a transport error", err, time.Since(start))
	}
	if _, rerr := a.Read(make([]byte, 1)); rerr == nil || rerr == io.EOF {
		t.Fatalf("Read after the peer was killed: %v, want the error", rerr)
	}
	t.Logf("writer failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// Many more one-byte writes than there are message credits and send queue slots:
// the writer waits for credits and completions, never overruns a queue.
func TestManyTinyWrites(t *testing.T) {
	a, b := pair(t)
	const n = 20 * sendDepth
	go func() {
		for i := range n {
			if _, err := a.Write([]byte{byte(i)}); err != nil {
				t.Error(err)
				return
			}
		}
		a.CloseWrite()
	}()
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("read %d bytes, want %d", len(got), n)
	}
	for i, c := range got {
		if c != byte(i) {
			t.Fatalf("byte %d is %d, want %d", i, c, byte(i))
		}
	}
}

// TestSmallPeerRingNeverStallsTheWriter: WRITEs are signaled selectively, so a writer
// that runs out of room must have asked for a completion of its last WRITE, or it
// waits for ever. A peer with a 20000-byte ring and 5 message credits runs out after
// 3 messages of 7000-byte writes, long before every 16th WRITE is signaled.
func TestSmallPeerRingNeverStallsTheWriter(t *testing.T) {
	a, b := pairSized(t, 20000, 5)
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	werr := make(chan error, 1)
	go func() {
		a.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for p := want; len(p) > 0; p = p[min(len(p), 7000):] {
			if _, err := a.Write(p[:min(len(p), 7000)]); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	got := make([]byte, len(want))
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatalf("read: %v (writer: %v)", err, <-werr)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read are not the bytes written")
	}
}

// TestCloseAfterPeerClosedDoesNotWait: a side whose peer has closed sends no CLOSE, so
// no completion will stand for its last unsignaled WRITEs; they no longer matter (the
// peer reads no more), and Close must not wait for them.
func TestCloseAfterPeerClosedDoesNotWait(t *testing.T) {
	a, b := pair(t)
	if _, err := a.Write([]byte("unsignaled")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(b, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the peer's close: %v, want io.EOF", err)
	}
	start := time.Now()
	a.Close()
	if d := time.Since(start); d > closeWait/2 {
		t.Fatalf("Close took %v", d)
	}
}

// TestFullDuplexWriterNeverWaitsForTheProbe: one side writes several rings' worth while
// its reader takes the peer's small messages one at a time and pauses between them, so
// the writer often waits for credits while the reader has just spun and returned. The
// credits must reach the writer through whoever polls the CQ: the writer never waits
// out probeInterval (1 s) for them.
func TestFullDuplexWriterNeverWaitsForTheProbe(t *testing.T) {
	a, b := pairSized(t, 64<<10, msgCredits)
	const total = 64 * (64 << 10)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // b's chatter towards a's reader
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			if _, err := b.Write([]byte{1}); err != nil {
				return
			}
		}
	}()
	go func() { // a's reader: one message, then a pause without reading
		buf := make([]byte, 1)
		for {
			if _, err := a.Read(buf); err != nil {
				return
			}
			time.Sleep(300 * time.Microsecond)
		}
	}()
	go io.Copy(io.Discard, b)
	start := time.Now()
	chunk := make([]byte, 16<<10)
	for sent := 0; sent < total; sent += len(chunk) {
		if _, err := a.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.probeWaits.Load(); n != 0 {
		t.Fatalf("writing %d bytes through a 64 KiB ring took %v: the writer waited for its probe %d times instead of the credits", total, time.Since(start), n)
	}
}
