package rdmanet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The soak: many connections at once, some of them read slowly, and a peer process
// killed mid-stream. Every connection carries framed, sequence-numbered, checksummed
// streams both ways, so a byte lost, duplicated, reordered or sent down the wrong
// connection fails the check. The short form runs in go test; RDMANET_SOAK=duration
// (e.g. 2m) runs the long form, with more connections streaming for that long:
//
//	RDMANET_SOAK=2m go test -run TestSoak -timeout 10m ./rdmanet/

// soakConfig is how big the soak is.
type soakConfig struct {
	live, victims int           // connections that live, connections to the process killed
	frames        int           // frames each way on each live connection, or
	duration      time.Duration // how long they stream (the long form)
}

func soakConfigFromEnv(t *testing.T) soakConfig {
	cfg := soakConfig{live: 48, victims: 16, frames: 400}
	if raceEnabled {
		cfg.frames = 40 // the race detector makes the framing much slower
	}
	if s := os.Getenv("RDMANET_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("RDMANET_SOAK=%q: %v", s, err)
		}
		cfg = soakConfig{live: 192, victims: 64, duration: d}
	}
	return cfg
}

// victimSide is the server's side of a connection to the process that is killed.
type victimSide struct {
	frames              atomic.Uint64 // frames checked so far
	readErr, writeErr   error
	readTook, writeTook time.Duration // from the kill to each error
}

// TestSoak streams on many connections at once, a quarter of them read slowly, while
// a peer process with more connections to the same listener is killed (SIGKILL)
// mid-stream. The live connections get every frame exactly once and in order; on
// each of the killed process's connections both Read and Write fail, with an error,
// not io.EOF; and once everything is closed no goroutine is left and the devices
// are closed.
func TestSoak(t *testing.T) {
	cfg := soakConfigFromEnv(t)
	before := runtime.NumGoroutine()
	srvAddr, liveAddr, childAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	l, err := Listen("rdma", netip.AddrPortFrom(srvAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	acceptedc := make(chan []net.Conn, 1)
	go func() {
		var cs []net.Conn
		defer func() { acceptedc <- cs }()
		for range cfg.live + cfg.victims {
			c, err := l.Accept()
			if err != nil {
				t.Errorf("accept: %v", err)
				return
			}
			cs = append(cs, c)
		}
	}()

	ch := startChild(t, "soak", "RDMANET_TEST_ADDR="+l.Addr().String(),
		"RDMANET_TEST_LOCAL="+childAddr.String(), "RDMANET_TEST_CONNS="+strconv.Itoa(cfg.victims))
	d := &Dialer{LocalAddr: liveAddr, Timeout: 20 * time.Second}
	var clients []net.Conn
	for range cfg.live {
		c, err := d.DialContext(context.Background(), "rdma", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	ch.expect(t, "connected")
	var servers, victimConns []net.Conn
	for _, c := range <-acceptedc {
		t.Cleanup(func() { c.Close() })
		if c.RemoteAddr().(*Addr).AddrPort.Addr() == childAddr {
			victimConns = append(victimConns, c)
		} else {
			servers = append(servers, c)
		}
	}
	if len(servers) != cfg.live || len(victimConns) != cfg.victims {
		t.Fatalf("accepted %d connections from this process and %d from the child, want %d and %d",
			len(servers), len(victimConns), cfg.live, cfg.victims)
	}

	start := time.Now()
	var live sync.WaitGroup
	for i, c := range clients {
		live.Go(func() { streamFrames(t, c, uint32(i), cfg, start) })
		live.Go(func() { checkFrames(t, c, false) })
	}
	for i, c := range servers {
		live.Go(func() { streamFrames(t, c, 1<<31|uint32(i), cfg, start) })
		live.Go(func() { checkFrames(t, c, i%4 == 0) })
	}
	victims := make([]*victimSide, len(victimConns))
	var killedAt atomic.Pointer[time.Time]
	sinceKill := func() time.Duration { return time.Since(*killedAt.Load()) }
	var dying sync.WaitGroup
	for i, c := range victimConns {
		v := &victimSide{}
		victims[i] = v
		dying.Go(func() {
			fw := newFrameWriter(c, 1<<30|uint32(i))
			for v.writeErr == nil {
				v.writeErr = fw.next()
			}
			v.writeTook = sinceKill()
		})
		dying.Go(func() {
			fr := newFrameReader(c)
			for v.readErr == nil {
				if v.readErr = fr.next(); v.readErr == nil {
					v.frames.Add(1)
				}
			}
			v.readTook = sinceKill()
		})
	}

	// Kill the child once every one of its connections is streaming.
	for _, v := range victims {
		for v.frames.Load() < 20 {
			if time.Since(start) > 20*time.Second {
				ch.fatal(t, "the child's connections are not streaming")
			}
			time.Sleep(time.Millisecond)
		}
	}
	now := time.Now()
	killedAt.Store(&now)
	ch.kill()

	waitGroup(t, &live, time.Minute, "the live connections' streams")
	liveTook := time.Since(start)
	// The killed process's connections learn it is gone when a message to it
	// exhausts its retries: 8 tries of the local ACK timeout, 2.1 s (cm's, rdma_cm's
	// on RoCE), about 18 s.
	waitGroup(t, &dying, time.Minute, "the killed process's connections to fail")
	var slowest time.Duration
	for i, v := range victims {
		for _, e := range []struct {
			op   string
			err  error
			took time.Duration
		}{{"read", v.readErr, v.readTook}, {"write", v.writeErr, v.writeTook}} {
			if errors.Is(e.err, io.EOF) || errors.Is(e.err, errStreamEnd) || errors.Is(e.err, net.ErrClosed) {
				t.Errorf("connection %d to the killed process: %s ended with %v, not an error saying why", i, e.op, e.err)
			}
			slowest = max(slowest, e.took)
		}
	}
	t.Logf("%d live connections streamed in %v; the killed process's %d failed within %v of the kill (%v)",
		cfg.live, liveTook, cfg.victims, slowest, victims[0].readErr)

	// Everything closed, the devices close and every goroutine ends.
	for _, cs := range [][]net.Conn{clients, servers, victimConns} {
		for _, c := range cs {
			c.Close()
		}
	}
	l.Close()
	waitUntil(t, 20*time.Second, "the devices to close", func() bool {
		devices.mu.Lock()
		defer devices.mu.Unlock()
		return devices.m[srvAddr] == nil && devices.m[liveAddr] == nil
	})
	checkGoroutines(t, before)
}

// streamFrames writes frames on c, cfg.frames of them or for cfg.duration from
// start, then the end frame, and half-closes.
func streamFrames(t *testing.T, c net.Conn, id uint32, cfg soakConfig, start time.Time) {
	fw := newFrameWriter(c, id)
	for i := 0; ; i++ {
		if cfg.duration > 0 && time.Since(start) > cfg.duration || cfg.duration == 0 && i == cfg.frames {
			break
		}
		if err := fw.next(); err != nil {
			t.Errorf("writing frame %d of connection %d: %v", i, id, err)
			return
		}
	}
	if err := fw.end(); err != nil {
		t.Errorf("ending connection %d: %v", id, err)
	}
}

// checkFrames reads and checks c's frames up to the end frame and io.EOF after it;
// a slow reader sleeps every 16 frames.
func checkFrames(t *testing.T, c net.Conn, slow bool) {
	fr := newFrameReader(c)
	for {
		err := fr.next()
		if errors.Is(err, errStreamEnd) {
			break
		}
		if err != nil {
			t.Errorf("reading %v: %v", c.LocalAddr(), err)
			return
		}
		if slow && fr.frames%16 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if n, err := fr.r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("connection %d after its end frame: %d bytes, %v; want io.EOF", fr.id, n, err)
	}
}

// waitGroup waits for wg, failing the test with every goroutine's stack after timeout.
func waitGroup(t *testing.T, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		buf := make([]byte, 1<<20)
		t.Fatalf("waited %v for %s:\n%s", timeout, what, buf[:runtime.Stack(buf, true)])
	}
}

// checkGoroutines fails the test, listing every goroutine, unless their number comes
// back to before within 10 s: what a test started must end when it closes everything.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after closing, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// childSoak is the process the soak kills: it dials RDMANET_TEST_CONNS connections
// to RDMANET_TEST_ADDR from RDMANET_TEST_LOCAL, says "connected", and streams frames
// both ways on each, checking what arrives, until it is killed.
func childSoak() error {
	local, err := netip.ParseAddr(os.Getenv("RDMANET_TEST_LOCAL"))
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(os.Getenv("RDMANET_TEST_CONNS"))
	if err != nil {
		return err
	}
	d := &Dialer{LocalAddr: local, Timeout: 20 * time.Second}
	errc := make(chan error, 2*n)
	var conns []net.Conn
	for range n {
		c, err := d.DialContext(context.Background(), "rdma", os.Getenv("RDMANET_TEST_ADDR"))
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	if _, err := os.Stdout.WriteString("connected\n"); err != nil {
		return err
	}
	for i, c := range conns {
		go func() {
			fw := newFrameWriter(c, uint32(i))
			for {
				if err := fw.next(); err != nil {
					errc <- fmt.Errorf("writing: %w", err)
					return
				}
			}
		}()
		go func() {
			fr := newFrameReader(c)
			for {
				if err := fr.next(); err != nil {
					errc <- fmt.Errorf("reading: %w", err)
					return
				}
			}
		}()
	}
	return <-errc // nothing ends before the kill
}
