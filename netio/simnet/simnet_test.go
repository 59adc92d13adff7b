package simnet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/netio"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

func mustListen(t *testing.T, n *Network, a netip.AddrPort) netio.Conn {
	t.Helper()
	c, err := n.Listen(a)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sendSeq sends count numbered datagrams from a to b, batch at a time,
// gap apart in (fake) time.
func sendSeq(t *testing.T, a netio.Conn, to netip.AddrPort, count, batch int, gap time.Duration) {
	t.Helper()
	ms := make([]netio.Message, batch)
	for i := range ms {
		ms[i].Buf = make([]byte, 64)
	}
	for i := 0; i < count; i += batch {
		k := min(batch, count-i)
		for j := range k {
			binary.BigEndian.PutUint32(ms[j].Buf, uint32(i+j))
			ms[j].N, ms[j].Addr = 64, to
		}
		if n, err := a.WriteBatch(ms[:k]); n != k || err != nil {
			t.Errorf("WriteBatch = %d, %v", n, err)
			return
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
}

// drain reads everything that arrives at c until the network is quiet.
type rx struct {
	seq     uint32
	at      time.Duration
	corrupt bool
}

func drain(t *testing.T, c netio.Conn, start time.Time) (got []rx) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ms := make([]netio.Message, 8)
		for i := range ms {
			ms[i].Buf = make([]byte, 128)
		}
		for {
			n, err := c.ReadBatch(ms)
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Error(err)
				}
				return
			}
			for _, m := range ms[:n] {
				b := m.Buf[:m.N]
				r := rx{seq: binary.BigEndian.Uint32(b), at: time.Since(start)}
				r.corrupt = !bytes.Equal(b[4:], make([]byte, 60))
				got = append(got, r)
			}
		}
	}()
	synctest.Wait() // reader blocked, nothing in flight at a due time...
	time.Sleep(time.Hour)
	synctest.Wait()
	c.Close()
	<-done
	return got
}

func run(t *testing.T, seed uint64, f Faults, count int) ([]rx, Stats) {
	var got []rx
	var st Stats
	synctest.Test(t, func(t *testing.T) {
		n := New(seed, f)
		a, b := mustListen(t, n, addrA), mustListen(t, n, addrB)
		start := time.Now()
		go sendSeq(t, a, addrB, count, 8, 10*time.Microsecond)
		got = drain(t, b, start)
		a.Close()
		st = n.Stats()
	})
	return got, st
}

func TestDeterministic(t *testing.T) {
	f := Faults{Loss: 0.1, Duplicate: 0.05, Reorder: 0.1, Corrupt: 0.05, Delay: time.Millisecond, Jitter: 200 * time.Microsecond, ReorderDelay: 2 * time.Millisecond}
	g1, s1 := run(t, 42, f, 2000)
	g2, s2 := run(t, 42, f, 2000)
	g3, _ := run(t, 43, f, 2000)
	if !slices.Equal(g1, g2) || s1 != s2 {
		t.Fatalf("same seed, different outcome: %d vs %d datagrams, %+v vs %+v", len(g1), len(g2), s1, s2)
	}
	if slices.Equal(g1, g3) {
		t.Fatal("different seeds, same outcome")
	}
}

// TestRandomPerSource: with RandomPerSource a datagram's fate depends on what its own
// source sent before it, not on the order in which two hosts that send at the same
// instant reach the Network (under synctest, goroutine order). A and B each send 300
// numbered datagrams to C, both at every instant, A's first or B's first: C gets the
// same datagrams at the same times either way. With the shared generator it does not.
func TestRandomPerSource(t *testing.T) {
	addrC := netip.MustParseAddrPort("10.0.0.3:4791")
	f := Faults{Loss: 0.2, Duplicate: 0.05, Reorder: 0.1, Delay: time.Millisecond, Jitter: 300 * time.Microsecond}
	fates := func(perSource, aFirst bool) []rx {
		var got []rx
		synctest.Test(t, func(t *testing.T) {
			n := New(5, f)
			if perSource {
				n.RandomPerSource()
			}
			a, b, c := mustListen(t, n, addrA), mustListen(t, n, addrB), mustListen(t, n, addrC)
			start := time.Now()
			go func() {
				m := []netio.Message{{Buf: make([]byte, 64), N: 64, Addr: addrC}}
				send := func(from netio.Conn, seq int) {
					binary.BigEndian.PutUint32(m[0].Buf, uint32(seq))
					if k, err := from.WriteBatch(m); k != 1 || err != nil {
						t.Errorf("WriteBatch = %d, %v", k, err)
					}
				}
				for i := range 300 {
					if aFirst {
						send(a, i)
						send(b, 1000+i)
					} else {
						send(b, 1000+i)
						send(a, i)
					}
					time.Sleep(10 * time.Microsecond)
				}
			}()
			got = drain(t, c, start)
			a.Close()
			b.Close()
		})
		slices.SortFunc(got, func(x, y rx) int {
			if x.seq != y.seq {
				return int(x.seq) - int(y.seq)
			}
			return int(x.at - y.at)
		})
		return got
	}
	if x, y := fates(true, true), fates(true, false); !slices.Equal(x, y) {
		t.Errorf("per source: %d datagrams arrived with A first, %d with B first, or at other times", len(x), len(y))
	}
	if slices.Equal(fates(false, true), fates(false, false)) {
		t.Error("shared generator: the same fates whichever host sent first (the test shows nothing)")
	}
}

func TestFaultRates(t *testing.T) {
	const count = 20000
	f := Faults{Loss: 0.1, Duplicate: 0.05, Reorder: 0.1, Corrupt: 0.02, Delay: time.Millisecond, ReorderDelay: time.Millisecond}
	got, st := run(t, 7, f, count)
	near := func(name string, v uint64, p float64) {
		want := p * count
		if math.Abs(float64(v)-want) > 5*math.Sqrt(want) {
			t.Errorf("%s = %d, want about %.0f", name, v, want)
		}
	}
	near("Dropped", st.Dropped, f.Loss)
	near("Duplicated", st.Duplicated, f.Duplicate*(1-f.Loss))
	near("Reordered", st.Reordered, f.Reorder*(1-f.Loss))
	near("Corrupted", st.Corrupted, f.Corrupt*(1-f.Loss))
	if st.Sent != count || uint64(len(got)) != st.Delivered || st.Delivered != count-st.Dropped+st.Duplicated {
		t.Errorf("stats %+v, received %d", st, len(got))
	}
	corrupt, inversions := 0, 0
	for i, r := range got {
		if r.corrupt || r.seq >= count {
			corrupt++
		}
		if i > 0 && r.seq < got[i-1].seq {
			inversions++
		}
	}
	if corrupt > int(st.Corrupted) || corrupt == 0 {
		t.Errorf("%d corrupt datagrams seen, %d corrupted", corrupt, st.Corrupted)
	}
	if inversions == 0 {
		t.Error("no datagram arrived out of order")
	}
	t.Logf("%+v; %d corrupt seen, %d inversions", st, corrupt, inversions)
}

func TestNoFaultsInOrderAndTimed(t *testing.T) {
	got, st := run(t, 1, Faults{Delay: 3 * time.Millisecond}, 100)
	if len(got) != 100 || st.Delivered != 100 {
		t.Fatalf("%d delivered, %+v", len(got), st)
	}
	for i, r := range got {
		if r.seq != uint32(i) || r.corrupt {
			t.Fatalf("datagram %d: %+v", i, r)
		}
		if r.at < 3*time.Millisecond {
			t.Fatalf("datagram %d arrived after %v, before the 3ms delay", i, r.at)
		}
	}
}

func TestFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1, Faults{})
		seen := 0
		n.SetFilter(func(src, dst netip.AddrPort, b []byte) Verdict {
			if src != addrA || dst != addrB {
				t.Errorf("filter saw %v -> %v", src, dst)
			}
			seen++
			if seen == 3 { // drop the third datagram
				return Drop
			}
			return Pass
		})
		a, b := mustListen(t, n, addrA), mustListen(t, n, addrB)
		sendSeq(t, a, addrB, 10, 4, 0)
		got := drain(t, b, time.Now())
		a.Close()
		var seqs []uint32
		for _, r := range got {
			seqs = append(seqs, r.seq)
		}
		if want := []uint32{0, 1, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(seqs, want) {
			t.Fatalf("got %v, want %v", seqs, want)
		}
		if st := n.Stats(); st.Filtered != 1 {
			t.Fatalf("%+v", st)
		}
	})
}

func TestSegSizeSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1, Faults{Delay: time.Millisecond})
		a, b := mustListen(t, n, addrA), mustListen(t, n, addrB)
		defer a.Close()
		defer b.Close()
		if c := a.Caps(); c.GSO || c.GRO || !c.IPv4IDZero || c.BatchSize != 32 {
			t.Fatalf("caps %+v", c)
		}
		buf := make([]byte, 2500)
		for i := range buf {
			buf[i] = byte(i / 1000)
		}
		a.WriteBatch([]netio.Message{{Buf: buf, N: len(buf), Addr: addrB, SegSize: 1000}})
		ms := make([]netio.Message, 8)
		for i := range ms {
			ms[i].Buf = make([]byte, 2000)
		}
		k, err := b.ReadBatch(ms)
		if err != nil || k != 3 {
			t.Fatalf("ReadBatch = %d, %v", k, err)
		}
		for i, want := range []int{1000, 1000, 500} {
			if ms[i].N != want || ms[i].Buf[0] != byte(i) || ms[i].Addr != addrA || ms[i].SegSize != 0 {
				t.Fatalf("datagram %d: N=%d first=%d from %v", i, ms[i].N, ms[i].Buf[0], ms[i].Addr)
			}
		}
	})
}

func TestQueueFullAndNoListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1, Faults{})
		n.SetQueueLimit(10)
		a, b := mustListen(t, n, addrA), mustListen(t, n, addrB)
		sendSeq(t, a, addrB, 15, 15, 0)
		sendSeq(t, a, netip.MustParseAddrPort("10.0.0.9:1"), 2, 2, 0)
		st := n.Stats()
		if st.QueueFull != 5 || st.Delivered != 10 || st.NoListener != 2 {
			t.Fatalf("%+v", st)
		}
		if _, err := n.Listen(addrA); !errors.Is(err, ErrAddrInUse) {
			t.Fatalf("Listen on a bound address: %v", err)
		}
		a.Close()
		b.Close()
		if c, err := n.Listen(addrA); err != nil {
			t.Fatalf("Listen after Close: %v", err)
		} else {
			c.Close()
		}
	})
}

func TestCloseUnblocksRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(1, Faults{})
		c := mustListen(t, n, addrA)
		errc := make(chan error)
		go func() {
			_, err := c.ReadBatch(make([]netio.Message, 1))
			errc <- err
		}()
		synctest.Wait()
		c.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v", err)
		}
		if _, err := c.WriteBatch([]netio.Message{{Addr: addrA}}); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteBatch after Close: %v", err)
		}
	})
}

// TestNoLeak runs traffic outside synctest with real timers and checks that
// the goroutine count settles back once every Conn is closed.
func TestNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	n := New(3, Faults{Delay: time.Millisecond, Jitter: time.Millisecond, Duplicate: 0.2, Reorder: 0.2})
	a, _ := n.Listen(addrA)
	b, _ := n.Listen(addrB)
	go func() {
		ms := make([]netio.Message, 4)
		for i := range ms {
			ms[i].Buf = make([]byte, 64)
		}
		for {
			if _, err := b.ReadBatch(ms); err != nil {
				return
			}
		}
	}()
	for range 50 {
		a.WriteBatch([]netio.Message{{Buf: make([]byte, 10), N: 10, Addr: addrB}})
	}
	time.Sleep(5 * time.Millisecond)
	n.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
