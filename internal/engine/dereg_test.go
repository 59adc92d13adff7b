package engine_test

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goverbs/goverbs/netio/simnet"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/wire"
)

// Deregistering a memory region while a peer's multi-packet request is using it. Once
// MR.Close (ibv_dereg_mr) returns, the device must not touch the memory again: the
// program may reuse it, or unmap it (verbs.Mmap's documentation says to Munmap after the
// MR is closed). The remaining packets of a WRITE must be refused (remote access error),
// not placed through a slice resolved when the WRITE began.

const derefChildEnv = "GOVERBS_DEREG_CHILD"

// derefHosts are two devices on a simulated network with a 1 ms one-way delay, so that
// an 8 MiB transfer (8192 packets, 128 per round trip) takes about 130 ms of fake time and
// "in the middle of it" is a definite moment. Call inside synctest.
func derefHosts(t *testing.T) (a, b *host, p *pair) { return derefHostsMTU(t, verbs.MTU1024) }

// derefHostsMTU is derefHosts with another MTU.
func derefHostsMTU(t *testing.T, mtu verbs.MTU) (a, b *host, p *pair) {
	n := simnet.New(1, simnet.Faults{Delay: time.Millisecond})
	host := func(addr string) *host {
		c, err := n.Listen(netip.AddrPortFrom(netip.MustParseAddr(addr), wire.UDPPort))
		if err != nil {
			t.Fatal(err)
		}
		return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr), Conn: c, MTU: mtu})
	}
	a, b = host("127.0.200.41"), host("127.0.200.42")
	params := defaultRC()
	params.MTU = mtu
	return a, b, newPair(t, a, b, verbs.QPTypeRC, params)
}

// startBigOp starts a WRITE into (or READ from) all of mr and returns 20 ms (fake) later,
// with about a sixth of it done.
func startBigOp(t *testing.T, p *pair, op verbs.WROpcode, mr *verbs.MR, local *verbs.MR) {
	t.Helper()
	if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.SGE(0, mr.Len())},
		RemoteAddr: mr.Addr(), RKey: mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
}

func TestDeregisterDuringTransfer(t *testing.T) {
	t.Run("WRITE into reused memory", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const n = 8 << 20
			a, b, p := derefHosts(t)
			local := a.MR(t, n, allAccess)
			fill(local.Buf(), 1)
			buf := make([]byte, n)
			mr, err := b.PD.RegMR(buf, allAccess)
			if err != nil {
				t.Fatal(err)
			}
			startBigOp(t, p, verbs.WRRDMAWrite, mr, local)
			if err := mr.Close(); err != nil {
				t.Fatal(err)
			}
			wc, touched := reuseAndWait(t, a, buf) // the program reuses the memory at once
			if touched > 0 || wc.Status == verbs.WCSuccess {
				t.Errorf("WRITE after MR.Close: completion %v, %d bytes of the deregistered memory written", wc.Status, touched)
			}
			a.Dev.Close()
			b.Dev.Close()
		})
	})
	t.Run("WRITE through a window invalidated mid-way", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const n = 8 << 20
			a, b, p := derefHosts(t)
			local := a.MR(t, n, allAccess)
			buf := make([]byte, n)
			mr, err := b.PD.RegMR(buf, allAccess|verbs.AccessMWBind)
			if err != nil {
				t.Fatal(err)
			}
			mw, err := b.PD.AllocMW(verbs.MWType2)
			if err != nil {
				t.Fatal(err)
			}
			rkey := verbs.IncRKey(mw.RKey())
			p.QB.PostSend(verbs.SendWR{ID: 7, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBindWR{MW: mw, RKey: rkey,
				MWBind: verbs.MWBind{MR: mr, Addr: mr.Addr(), Length: n, Access: verbs.AccessRemoteWrite}}})
			expectStatus(t, b.CQ, 7, verbs.WCSuccess)
			if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.SGE(0, n)},
				RemoteAddr: mr.Addr(), RKey: rkey}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			p.QB.PostSend(verbs.SendWR{ID: 8, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, Imm: rkey})
			expectStatus(t, b.CQ, 8, verbs.WCSuccess)
			wc, touched := reuseAndWait(t, a, buf)
			if touched > 0 || wc.Status == verbs.WCSuccess {
				t.Errorf("WRITE after LOCAL_INV of its window: completion %v, %d bytes written through the revoked window", wc.Status, touched)
			}
			mw.Close()
			a.Dev.Close()
			b.Dev.Close()
		})
	})
	// In a child process each: the memory is unmapped, and a touch would kill it.
	for _, side := range []string{"target", "source"} {
		t.Run("WRITE with its "+side+" memory unmapped", func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestDeregisterChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), derefChildEnv+"="+side)
			out, err := cmd.CombinedOutput()
			if err != nil {
				head := string(out)
				if i := strings.Index(head, "\ngoroutine "); i > 0 {
					head = head[:i]
				}
				t.Fatalf("the process died (%v) when the MR's memory was unmapped after MR.Close:\n%s", err, head)
			}
		})
	}
}

// TestDeregisterChild runs in a child process: it unmaps a region's memory right after
// closing the MR while a WRITE into it ("target") or out of it ("source") is in progress.
// The source case runs at MTU 4096, where the sender sends full packets' payload from
// registered memory in place (the engine's txBatch): 2048 packets, 16 round trips, so
// the WRITE is still in progress 20 ms in.
func TestDeregisterChild(t *testing.T) {
	side := os.Getenv(derefChildEnv)
	if side == "" {
		t.Skip("child process of TestDeregisterDuringTransfer")
	}
	synctest.Test(t, func(t *testing.T) {
		const n = 8 << 20
		mtu := verbs.MTU1024
		if side == "source" {
			mtu = verbs.MTU4096
		}
		a, b, p := derefHostsMTU(t, mtu)
		buf, err := verbs.Mmap(n, false)
		if err != nil {
			t.Fatal(err)
		}
		var mr, local *verbs.MR
		if side == "source" {
			local, err = a.PD.RegMR(buf, allAccess)
			mr = b.MR(t, n, allAccess)
		} else {
			local = a.MR(t, n, allAccess)
			mr, err = b.PD.RegMR(buf, allAccess)
		}
		if err != nil {
			t.Fatal(err)
		}
		closed := mr
		if side == "source" {
			closed = local
		}
		startBigOp(t, p, verbs.WRRDMAWrite, mr, local)
		if err := closed.Close(); err != nil {
			t.Fatal(err)
		}
		if err := verbs.Munmap(buf); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(t, a.CQ, 1, 10*time.Second)[0]
		t.Logf("WRITE completed with %v", wc.Status)
		if wc.Status == verbs.WCSuccess {
			t.Errorf("WRITE whose %s MR was closed mid-way completed successfully", side)
		}
		a.Dev.Close()
		b.Dev.Close()
	})
}

// reuseAndWait fills buf with 0xee, as a program reusing memory it took back from the
// device would, then waits for the one completion on a's CQ: the WRITE's, and counts
// the bytes of buf written since.
func reuseAndWait(t *testing.T, a *host, buf []byte) (wc verbs.WC, touched int) {
	t.Helper()
	for i := range buf {
		buf[i] = 0xee
	}
	wc = waitWC(t, a.CQ, 1, 10*time.Second)[0]
	for _, x := range buf {
		if x != 0xee {
			touched++
		}
	}
	return wc, touched
}
