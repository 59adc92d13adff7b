package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// gsoConn is an in-memory Conn that reports GSO with the limits given, and checks every
// run the device hands it against them (the netiotest Conn underneath then sends the
// run as its datagrams).
type gsoConn struct {
	*netiotest.Conn
	caps netio.Caps

	mu      sync.Mutex
	sent    int    // datagrams
	longest int    // segments in the longest run
	bad     string // the first run that broke a limit or whose ICRC did not verify
}

// waitSent waits until the device has sent packets datagrams, for 5 s at most.
func (c *gsoConn) waitSent(t *testing.T, packets int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		sent := c.sent
		c.mu.Unlock()
		if sent >= packets {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the device sent %d of %d packets", sent, packets)
		}
	}
}

func (c *gsoConn) Caps() netio.Caps { return c.caps }

func (c *gsoConn) WriteBatch(msgs []netio.Message) (int, error) {
	c.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		segs := m.NumSegments()
		c.sent += segs
		c.longest = max(c.longest, segs)
		if segs > 1 && (segs > c.caps.MaxSegments || m.N > c.caps.MaxGSOBytes) && c.bad == "" {
			c.bad = fmt.Sprintf("a run of %d segments, %d bytes", segs, m.N)
		}
		m.Segments(func(seg int, b []byte) bool {
			ip := wire.IPHeader{Src: c.LocalAddr().Addr(), Dst: m.Addr.Addr(), SrcPort: c.LocalAddr().Port(),
				DstPort: m.Addr.Port(), DF: true, ID: netio.GSOSegmentID(0, seg)}
			if !wire.CheckICRC(&ip, b) && c.bad == "" {
				c.bad = fmt.Sprintf("segment %d of a run: the ICRC is not for Identification %d", seg, seg)
			}
			return true
		})
	}
	c.mu.Unlock()
	return c.Conn.WriteBatch(msgs)
}

// TestGSORunsWithinCaps: the device sizes its GSO runs by the limits the Conn reports
// (netio.Caps.MaxSegments and MaxGSOBytes), not by constants of its own, so every run
// leaves as one GSO send and segment i carries Identification i, as its ICRC assumes.
func TestGSORunsWithinCaps(t *testing.T) {
	for _, lim := range []struct{ segs, bytes, want int }{
		{3, 65487, 3},  // the segment count binds
		{64, 5000, 4},  // the byte budget binds: four 1040-byte MIDDLE packets
		{64, 65487, 0}, // the UDP backend's limits: no run exceeds them
	} {
		t.Run(fmt.Sprintf("MaxSegments=%d,MaxGSOBytes=%d", lim.segs, lim.bytes), func(t *testing.T) {
			conn := &gsoConn{Conn: netiotest.NewConn(fuzzLocal), caps: netio.Caps{BatchSize: 64, GSO: true,
				MaxSegments: lim.segs, MaxGSOBytes: lim.bytes, IPv4IDZero: true}}
			dev, pd, _, qp := rcOnConn(t, "gsolimits", conn, wire.MTU1024, 16,
				driver.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
			defer dev.Close()
			rcUp(t, qp, fuzzPeer.Addr(), fuzzPeerQPN, 0, fuzzSQPSN)
			buf := make([]byte, 40<<10)
			mr, err := pd.regMR(buf, driver.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			must(t, qp.PostSend([]driver.SendWR{{ID: 1, Opcode: driver.WRRDMAWrite,
				SGL: []driver.SGE{{Addr: mr.Addr(), Length: uint32(len(buf)), LKey: mr.LKey()}}, RemoteAddr: 0x1000, RKey: 0x1234}}))
			const packets = 40 // of 1 KiB
			conn.waitSent(t, packets)
			conn.mu.Lock()
			defer conn.mu.Unlock()
			if conn.bad != "" {
				t.Fatal(conn.bad)
			}
			if conn.longest < 2 || lim.want > 0 && conn.longest != lim.want {
				t.Fatalf("longest run %d segments, want %d (runs must be used, up to the limit)", conn.longest, lim.want)
			}
		})
	}
}
