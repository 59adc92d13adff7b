package netiotest

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
)

// TestPipe: the in-memory pair keeps the contract every backend keeps.
func TestPipe(t *testing.T) {
	TestConn(t, func(t *testing.T) (netio.Conn, netio.Conn) {
		a, b := Pipe(netip.MustParseAddrPort("127.0.0.2:4791"), netip.MustParseAddrPort("127.0.0.3:4791"))
		return a, b
	})
}

var (
	local = netip.MustParseAddrPort("127.0.0.2:4791")
	peer  = netip.MustParseAddrPort("127.0.0.3:4791")
)

func msg(b []byte, from netip.AddrPort) netio.Message {
	return netio.Message{Buf: b, N: len(b), Addr: from}
}

// TestDeliverLockstep: Deliver returns only when the reader has finished with every
// datagram delivered and come back for more, whether it blocks in ReadBatch or polls.
func TestDeliverLockstep(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(fmt.Sprintf("poll=%v", poll), func(t *testing.T) {
			c := NewConn(local)
			var handled atomic.Int64
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				msgs := make([]netio.Message, 3)
				for i := range msgs {
					msgs[i].Buf = make([]byte, 64)
				}
				for {
					var n int
					var err error
					if poll {
						n, err = c.PollBatch(msgs)
					} else {
						n, err = c.ReadBatch(msgs)
					}
					if err != nil {
						return
					}
					for range n {
						time.Sleep(time.Millisecond) // slow work the test must not overtake
						handled.Add(1)
					}
				}
			}()
			var in []netio.Message
			for i := range 7 {
				in = append(in, msg([]byte{byte(i)}, peer))
			}
			c.Deliver(in[:5], 2)
			if h := handled.Load(); h != 5 {
				t.Fatalf("Deliver returned with %d of 5 datagrams handled", h)
			}
			c.Deliver(in[5:], 0)
			if h := handled.Load(); h != 7 {
				t.Fatalf("Deliver returned with %d of 7 datagrams handled", h)
			}
			c.Close()
			<-stopped
			c.Deliver(in[:1], 1) // closed: returns at once
		})
	}
}

// TestInjectRun: an injected run reaches the reader coalesced, as a socket with GRO
// hands it over; cut to a short buffer it keeps its whole segments.
func TestInjectRun(t *testing.T) {
	c := NewConn(local)
	defer c.Close()
	run := make([]byte, 2500)
	c.Inject(netio.Message{Buf: run, N: len(run), SegSize: 1000, Addr: peer}, msg([]byte("x"), peer))
	msgs := []netio.Message{{Buf: make([]byte, 4096)}}
	if n, err := c.ReadBatch(msgs); n != 1 || err != nil || msgs[0].N != 2500 || msgs[0].SegSize != 1000 || msgs[0].Addr != peer {
		t.Fatalf("run: %d, %v, N=%d SegSize=%d from %v", n, err, msgs[0].N, msgs[0].SegSize, msgs[0].Addr)
	}
	c.Inject(netio.Message{Buf: run, N: len(run), SegSize: 1000, Addr: peer})
	small := []netio.Message{{Buf: make([]byte, 64)}, {Buf: make([]byte, 2100)}}
	if n, err := c.ReadBatch(small); n != 2 || err != nil || small[0].N != 1 || small[1].N != 2000 || small[1].SegSize != 1000 {
		t.Fatalf("truncated run: %d, %v, N=%d SegSize=%d", n, err, small[1].N, small[1].SegSize)
	}
}

// TestOnWrite: the hook sees every datagram, runs split and gathers gathered, with its
// destination, and a blocking hook holds WriteBatch as a slow kernel copy would.
func TestOnWrite(t *testing.T) {
	a, b := Pipe(local, peer)
	defer a.Close()
	defer b.Close()
	type seen struct {
		dst  netip.AddrPort
		data string
	}
	var got []seen
	gate := make(chan struct{})
	a.OnWrite(func(dst netip.AddrPort, d []byte) {
		<-gate
		got = append(got, seen{dst, string(d)})
	})
	wrote := make(chan error)
	go func() {
		_, err := a.WriteBatch([]netio.Message{
			{Buf: []byte("aaabbbc"), N: 7, SegSize: 3, Addr: peer},
			{Iov: [][]byte{[]byte("ga"), nil, []byte("ther")}, N: 6, Addr: local},
		})
		wrote <- err
	}()
	select {
	case err := <-wrote:
		t.Fatalf("WriteBatch returned (%v) while its hook blocked", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	want := []seen{{peer, "aaa"}, {peer, "bbb"}, {peer, "c"}, {local, "gather"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hook saw %v, want %v", got, want)
	}
	if p, _ := b.WaitReadable(0); !p {
		t.Fatal("the peer got nothing")
	}
}

// TestPipeAllocs: in steady state a write and a read on a Pipe allocate nothing, so that
// benchmarks on it count only the allocations of the code under test.
func TestPipeAllocs(t *testing.T) {
	a, b := Pipe(local, peer)
	defer a.Close()
	defer b.Close()
	out := []netio.Message{msg(make([]byte, 1000), peer), {Iov: [][]byte{make([]byte, 40), make([]byte, 8)}, N: 48, Addr: peer}}
	in := []netio.Message{{Buf: make([]byte, 2048)}, {Buf: make([]byte, 2048)}}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		if n, err := b.PollBatch(in); n != 2 || err != nil {
			t.Fatal(n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per write and read", allocs)
	}
}

// TestWritten: a Conn counts what it writes and, once asked, keeps copies to take.
func TestWritten(t *testing.T) {
	c := NewConn(local)
	defer c.Close()
	run := []byte("aaabbbc")
	c.WriteBatch([]netio.Message{{Buf: run, N: len(run), SegSize: 3, Addr: peer}})
	if n, kept := c.Written(), c.TakeWritten(); n != 3 || kept != nil {
		t.Fatalf("Written %d, kept %q before KeepWritten", n, kept)
	}
	c.KeepWritten()
	c.WriteBatch([]netio.Message{msg([]byte("one"), peer), msg([]byte("two"), peer)})
	c.WriteBatch([]netio.Message{{Buf: run, N: 4, SegSize: 3, Addr: peer}})
	run[0] = 'z' // the sender reuses its buffer: the kept copy stays
	if got := fmt.Sprintf("%q", c.TakeWritten()); got != `["one" "two" "aaa" "b"]` || c.Written() != 7 {
		t.Fatalf("kept %s, Written %d", got, c.Written())
	}
	if kept := c.TakeWritten(); kept != nil {
		t.Fatalf("taken twice: %q", kept)
	}
}
