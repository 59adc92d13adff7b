package rdmanet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/verbs"
)

// A hostile peer (it posts to its QP behind its Conn's back) breaks rsockets' protocol:
// the victim's connection fails with a clear error, no call stays blocked, nothing
// panics, and another connection on the same two devices goes on as if nothing had
// happened.
func TestProtocolViolationsFailTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		credits int
		// wrs are what the hostile side b posts, given what it knows of the victim a
		// (b.mu is held).
		wrs  func(a, b *Conn) []verbs.SendWR
		want string // in the victim's error
	}{
		{"unknown op 1", 0, ctrlWR(msgImm(1, 0)), "unknown op 1"},
		{"unknown op 3", 0, ctrlWR(msgImm(3, 5)), "unknown op 3"},
		{"unknown op 5", 0, ctrlWR(msgImm(5, 0)), "unknown op 5"},
		{"direct-write op on the wire", 0, ctrlWR(msgImm(opWrite, 1)), "unknown op 2"},
		{"unknown control", 0, ctrlWR(msgImm(opCtrl, 9)), "control message 9"},
		{"iomap never advertised", 0, ctrlWR(msgImm(opIOMapSGL, 0)), "iomap"},
		{"no immediate", 0, func(_, _ *Conn) []verbs.SendWR { return []verbs.SendWR{{Opcode: verbs.WRSend}} }, "without immediate"},
		{"data by SEND", 0, func(_, _ *Conn) []verbs.SendWR {
			return []verbs.SendWR{{Opcode: verbs.WRSendWithImm, Imm: msgImm(opData, 1)}}
		}, "by SEND"},
		{"data length not the WRITE's", 0, func(_, b *Conn) []verbs.SendWR {
			return []verbs.SendWR{dataWR(b, 8, msgImm(opData, 7))}
		}, "says 7"},
		{"credit beyond the ring", 0, func(_, b *Conn) []verbs.SendWR {
			// a has sent nothing: its window may move at most the credits b advertised.
			return ctrlWR(msgImm(opSGL, uint32(b.ep.credits+1)))(nil, b)
		}, "beyond the 256 credits"},
		{"credit going back", 0, ctrlWR(msgImm(opSGL, 0xFFFF)), "beyond the 256 credits"},
		{"data beyond the credits", 4, func(a, b *Conn) []verbs.SendWR {
			// a's credits follow the messages it receives, so a peer that outruns
			// them only shows when a cannot widen the window meanwhile: its control
			// slots are taken.
			a.mu.Lock()
			a.ctrls += 2 * ctrlSlots
			a.mu.Unlock()
			var wrs []verbs.SendWR
			for range 5 {
				wrs = append(wrs, dataWR(b, 1, msgImm(opData, 1)))
			}
			return wrs
		}, "beyond the 4 credits"},
		{"data beyond the buffers given", 0, func(_, b *Conn) []verbs.SendWR {
			// a gave its whole 64 KiB ring (both halves); the second ring's worth has
			// no room.
			return []verbs.SendWR{dataWR(b, 64<<10, msgImm(opData, 64<<10)), dataWR(b, 1, msgImm(opData, 1))}
		}, "beyond the buffers given"},
		{"SGL update of the wrong size", 0, func(_, b *Conn) []verbs.SendWR {
			return []verbs.SendWR{sglWR(b, 0, 8, msgImm(opSGL, uint32(b.rxComp)))}
		}, "SGL update of 8 bytes"},
		{"SGL update wrapping the address space", 0, func(a, b *Conn) []verbs.SendWR {
			// a fills b's first half, so that entry 0 of its target SGL is used up and
			// the next update there is taken.
			if _, err := a.Write(make([]byte, 32<<10)); err != nil {
				panic(err)
			}
			putSGE(b.ep.stage.Buf(), sge{addr: 1<<64 - 16, key: 1, length: 32}, nativeOrder)
			return []verbs.SendWR{sglWR(b, 0, sgeLen, msgImm(opSGL, uint32(b.rxComp)))}
		}, "wraps the address space"},
		{"SGL update outside the advertised array", 0, func(_, b *Conn) []verbs.SendWR {
			// The target SGL's MR is exactly its entries: a's device refuses the WRITE
			// (remote access error) and both QPs fail.
			return []verbs.SendWR{sglWR(b, sglEntries, sgeLen, msgImm(opSGL, uint32(b.rxComp)))}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			da, db := testDevices(t)
			credits := tc.credits
			if credits == 0 {
				credits = msgCredits
			}
			a, b, err := testPairSized(t, da, db, 64<<10, credits)
			if err != nil {
				t.Fatal(err)
			}
			// The bystander: a second connection between the same two devices.
			x, y, err := testPair(t, da, db)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range []*Conn{a, b, x, y} {
					c.Close()
					<-c.tornDown
				}
			}()
			b.mu.Lock()
			for _, w := range tc.wrs(a, b) {
				w.ID, w.Flags = wrCtrl, verbs.SendSignaled
				if err = b.ep.qp.PostSend(w); err != nil {
					break
				}
				b.ctrls++
				b.posted++
			}
			b.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			// The poller finds the violation whatever the reader does; reading only
			// after it keeps the reader's credits out of the cases that count bytes.
			waitUntil(t, 5*time.Second, "the victim to fail", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return a.err != nil
			})
			a.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(io.Discard, a)
			if err == nil || !(errors.Is(err, errProtocol) || tc.want == "") {
				t.Fatalf("Read: %v, want a protocol violation", err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("Read: %v, want it to say %q", err, tc.want)
			}
			if _, werr := a.Write([]byte("x")); werr == nil {
				t.Fatalf("Write after the violation succeeded")
			}
			t.Logf("victim: %v", err)
			bystanderWorks(t, x, y)
		})
	}
}

// ctrlWR is a zero-length WRITE WITH IMMEDIATE, as rsockets sends its messages.
func ctrlWR(imm uint32) func(_, _ *Conn) []verbs.SendWR {
	return func(_, _ *Conn) []verbs.SendWR {
		return []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, Imm: imm}}
	}
}

// dataWR WRITEs n bytes of b's staging buffer to a's current target buffer. c.mu is
// held.
func dataWR(b *Conn, n int, imm uint32) verbs.SendWR {
	t := &b.target[b.tgt]
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: imm,
		SGL: []verbs.SGE{b.ep.stage.SGE(0, n)}, RemoteAddr: t.addr, RKey: t.key}
	if uint32(n) <= t.length {
		t.addr += uint64(n)
		t.length -= uint32(n)
	}
	if t.length == 0 {
		b.tgt = (b.tgt + 1) % sglEntries
	}
	return wr
}

// sglWR WRITEs n bytes from the start of b's staging buffer into entry i of a's
// target SGL.
func sglWR(b *Conn, i, n int, imm uint32) verbs.SendWR {
	return verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: imm, SGL: []verbs.SGE{b.ep.stage.SGE(0, n)},
		RemoteAddr: b.peer.targetSGL.addr + uint64(i)*sgeLen, RKey: b.peer.targetSGL.key}
}

// bystanderWorks checks that x and y still carry bytes both ways.
func bystanderWorks(t *testing.T, x, y *Conn) {
	t.Helper()
	for _, p := range [][2]*Conn{{x, y}, {y, x}} {
		msg := []byte("still here")
		if _, err := p[0].Write(msg); err != nil {
			t.Fatalf("bystander Write: %v", err)
		}
		got := make([]byte, len(msg))
		p[1].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(p[1], got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("bystander Read: %q, %v", got, err)
		}
	}
}

// A REQ whose private data is not rs_conn_data is refused (REJ); the listener, its
// device and its other connections go on. (Short private data cannot be told from
// long: rdma_cm pads the REQ's to 56 bytes with zeros, which parseConnData's own
// test covers.)
func TestMalformedConnDataIsRefused(t *testing.T) {
	l, d := listenDial(t)
	good, srv := dialAccept(t, l, d)

	dev, err := acquireDevice(d.LocalAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.release()
	cq, err := dev.dev.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	qpInit := verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	valid := (&endpoint{}).testConnData().marshal(nil)
	for name, pd := range map[string][]byte{
		"none":      nil,
		"version 0": append([]byte{0}, valid[1:]...),
		"no SGL":    append(append([]byte{}, valid[:20]...), append([]byte{0, 0, 0, 0}, valid[24:]...)...),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := dev.agent.Dial(ctx, l.Addr().(*Addr).AddrPort, &cm.Param{PD: dev.pd, QPInit: qpInit, PrivateData: pd})
		cancel()
		var rej *cm.RejectError
		if !errors.As(err, &rej) {
			t.Errorf("%s: Dial = %v, want the listener's REJ", name, err)
		}
	}
	// The connection made before goes on, and so does the listener.
	echoOnce(t, good, srv)
	c2, s2 := dialAccept(t, l, d)
	echoOnce(t, c2, s2)
}

// dialAccept connects d to l and returns both ends, closed when the test ends.
func dialAccept(t *testing.T, l net.Listener, d *Dialer) (c, s net.Conn) {
	t.Helper()
	c, err := d.DialContext(context.Background(), "rdma", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if s, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

// testConnData is a well-formed rs_conn_data naming nothing real.
func (*endpoint) testConnData() connData {
	return connData{credits: 16, targetSGL: sge{addr: 0x1000, key: 1, length: 2},
		dataBuf: sge{addr: 0x2000, key: 2, length: 4096}}
}

func echoOnce(t *testing.T, a, b interface {
	Write([]byte) (int, error)
	Read([]byte) (int, error)
}) {
	t.Helper()
	if _, err := a.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "ping" {
		t.Fatalf("read %q, %v", got, err)
	}
}
