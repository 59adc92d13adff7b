package engine_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// TestDeviceCountersBalance: on a lossless loopback every packet one device counts as sent
// the other counts as received, bytes too, whether it went alone or in a GSO or GRO run
// of many (the counters are added once per batch on both sides). A WRITE of 64 KiB at
// IB MTU 1024 is 64 packets in runs; eight SENDs of 8 bytes go one by one, each answered
// by an ACK.
func TestDeviceCountersBalance(t *testing.T) {
	a, b := newHost(t), newHost(t)
	p := newPair(t, a, b, verbs.QPTypeRC, defaultRC())
	src, dst := a.MR(t, 64<<10, allAccess), b.MR(t, 64<<10, allAccess)
	for i := range src.Buf() {
		src.Buf()[i] = byte(i * 13)
	}
	if err := p.QA.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, src.Len())},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := p.QB.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{dst.SGE(i*8, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	if wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %+v", wc)
	}
	if string(dst.Buf()) != string(src.Buf()) {
		t.Fatal("the WRITE's bytes differ")
	}
	for i := range 8 {
		if err := p.QA.PostSend(verbs.SendWR{ID: uint64(10 + i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(i*8, 8)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, a.CQ, 1, 5*time.Second)[0]; wc.Status != verbs.WCSuccess {
			t.Fatalf("SEND %d: %+v", i, wc)
		}
	}
	waitWC(t, b.RCQ, 8, 5*time.Second)

	count := func(h *host) map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range h.Dev.Counters() {
			m[c.Name] = c.Value
		}
		return m
	}
	// The last ACK may still be on its way when the last completion is polled.
	var ca, cb map[string]uint64
	for deadline := time.Now().Add(5 * time.Second); ; {
		ca, cb = count(a), count(b)
		if ca["sent_pkts"] == cb["rcvd_pkts"] && cb["sent_pkts"] == ca["rcvd_pkts"] &&
			ca["sent_bytes"] == cb["rcvd_bytes"] && cb["sent_bytes"] == ca["rcvd_bytes"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if ca["sent_pkts"] != cb["rcvd_pkts"] || ca["sent_bytes"] != cb["rcvd_bytes"] ||
		cb["sent_pkts"] != ca["rcvd_pkts"] || cb["sent_bytes"] != ca["rcvd_bytes"] {
		t.Fatalf("a sent %d packets (%d bytes), b received %d (%d); b sent %d (%d), a received %d (%d)",
			ca["sent_pkts"], ca["sent_bytes"], cb["rcvd_pkts"], cb["rcvd_bytes"],
			cb["sent_pkts"], cb["sent_bytes"], ca["rcvd_pkts"], ca["rcvd_bytes"])
	}
	// 64 WRITE packets and 8 SENDs, each with its 12-byte BTH and 4-byte ICRC at least;
	// b answers with at least an ACK for the WRITE and one per SEND.
	if ca["sent_pkts"] < 64+8 || ca["sent_bytes"] < 64<<10+8*8+(64+8)*16 || cb["sent_pkts"] < 1+8 {
		t.Fatalf("a sent %d packets (%d bytes), b %d: fewer than the transfers take", ca["sent_pkts"], ca["sent_bytes"], cb["sent_pkts"])
	}
	t.Logf("a sent %d packets (%d bytes), b sent %d (%d)", ca["sent_pkts"], ca["sent_bytes"], cb["sent_pkts"], cb["sent_bytes"])
}
