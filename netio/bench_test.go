package netio

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestZeroAllocs: steady-state WriteBatch and ReadBatch allocate nothing.
func TestZeroAllocs(t *testing.T) {
	for _, gso := range []bool{false, true} {
		t.Run(fmt.Sprintf("segsize=%v", gso), func(t *testing.T) {
			a := listen(t, "127.0.0.2:0", UDPOptions{})
			b := listen(t, "127.0.0.3:0", UDPOptions{})
			out := newMsgs(16, 4*1400)
			for i := range out {
				out[i].N, out[i].Addr = 1400, b.LocalAddr()
				if gso {
					out[i].N, out[i].SegSize = 4*1400, 1400
				}
			}
			in := newMsgs(16, MaxGROSize)
			want := 16
			if gso {
				want = 64
			}
			step := func() {
				if _, err := a.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < want; {
					n, err := b.ReadBatch(in)
					if err != nil {
						t.Fatal(err)
					}
					for i := range in[:n] {
						got += in[i].NumSegments()
					}
				}
			}
			step()
			if allocs := testing.AllocsPerRun(100, step); allocs != 0 {
				t.Errorf("%.1f allocations per write+read of a batch", allocs)
			}
		})
	}
}

// BenchmarkLoopback sends b.N datagrams over loopback from one Conn to
// another and reports what arrived: Mpps, GB/s (UDP payload) and loss.
//
//	go test -run '^$' -bench Loopback -benchmem -benchtime 200000x ./netio
func BenchmarkLoopback(b *testing.B) {
	for _, size := range []int{1400, 4096} {
		for _, mode := range []string{"single", "batch", "gso"} {
			b.Run(fmt.Sprintf("size=%d/%s", size, mode), func(b *testing.B) {
				benchLoopback(b, size, mode)
			})
		}
	}
}

func benchLoopback(b *testing.B, size int, mode string) {
	opts := UDPOptions{RecvBuf: 64 << 20, SendBuf: 16 << 20}
	batch := 64
	switch mode {
	case "single":
		batch = 1
		opts.DisableGSO, opts.DisableGRO = true, true
	case "batch":
		opts.DisableGSO, opts.DisableGRO = true, true
	}
	tx := listen(b, "127.0.0.2:0", opts)
	rx := listen(b, "127.0.0.3:0", opts)
	if mode == "gso" && (!tx.Caps().GSO || !rx.Caps().GRO) {
		b.Skip("no GSO/GRO")
	}
	var out []Message
	if mode == "gso" {
		// One message per GSO send of 16 segments; batch of 4 per sendmmsg.
		out = newMsgs(4, 16*size)
		for i := range out {
			out[i].N, out[i].SegSize, out[i].Addr = 16*size, size, rx.LocalAddr()
		}
	} else {
		out = newMsgs(batch, size)
		for i := range out {
			out[i].N, out[i].Addr = size, rx.LocalAddr()
		}
	}
	perCall := 0
	for i := range out {
		perCall += out[i].NumSegments()
	}
	inSize := size
	if rx.Caps().GRO {
		inSize = MaxGROSize
	}
	in := newMsgs(batch, inSize)
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := rx.ReadBatch(in)
			if err != nil {
				return
			}
			got := 0
			for i := range in[:n] {
				got += in[i].NumSegments()
			}
			received.Add(int64(got))
		}
	}()
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; sent += perCall {
		if _, err := tx.WriteBatch(out); err != nil {
			b.Fatal(err)
		}
	}
	// Wait for the receiver to catch up (or stop making progress).
	last := int64(-1)
	for r := received.Load(); r < int64(b.N) && r != last; r = received.Load() {
		last = r
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	rx.Close()
	<-done
	r := received.Load()
	b.ReportMetric(float64(r)/elapsed.Seconds()/1e6, "Mpps")
	b.ReportMetric(float64(r)*float64(size)/elapsed.Seconds()/1e9, "GB/s")
	b.ReportMetric(100*(1-float64(r)/float64(max(b.N, 1))), "loss%")
}
