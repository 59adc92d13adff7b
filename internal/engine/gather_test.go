package engine

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestGatherPinsMemory: a WRITE's payload is sent from its registered memory in place
// (txBatch.commitGather), so the memory must stay registered until the send has taken
// it. MR.Close (ibv_dereg_mr) waits for a send in progress; after it returns, the
// memory may be unmapped, and no later packet reads it. The packets carry the payload
// and an ICRC that verifies.
func TestGatherPinsMemory(t *testing.T) {
	// The Conn's WriteBatch blocks until the test opens the gate, as a slow kernel copy
	// would, and keeps what it was given, read at the moment it is sent.
	conn := netiotest.NewConn(fuzzLocal)
	entered, gate, sent := make(chan struct{}, 1), make(chan struct{}), make(chan []byte, 16)
	conn.OnWrite(func(_ netip.AddrPort, b []byte) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
		sent <- bytes.Clone(b)
	})
	dev, pd, _, qp := rcOnConn(t, "gather", conn, wire.MTU4096, 16,
		driver.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2})
	defer dev.Close()
	peerAH := driver.AHAttr{DGID: AddrToGID(fuzzPeer.Addr()), Port: 1}
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrAccessFlags))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTR, AH: peerAH, PathMTU: wire.MTU4096, DestQPN: fuzzPeerQPN, MaxDestRdAtomic: 1},
		driver.QPAttrState|driver.QPAttrAV|driver.QPAttrPathMTU|driver.QPAttrDestQPN|driver.QPAttrRQPSN|driver.QPAttrMaxDestRdAtomic|driver.QPAttrMinRNRTimer))
	must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTS, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		driver.QPAttrState|driver.QPAttrSQPSN|driver.QPAttrTimeout|driver.QPAttrRetryCnt|driver.QPAttrRNRRetry|driver.QPAttrMaxQPRdAtomic))

	// Two regions, the message split across them so that the first full packet gathers
	// from both, the second from B alone, and the short padded last one is copied.
	bufA, bufB := make([]byte, 5000), make([]byte, 7000)
	for i := range bufA {
		bufA[i] = byte(i * 7)
	}
	for i := range bufB {
		bufB[i] = byte(i*11 + 3)
	}
	mrA, err := pd.regMR(bufA, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mrB, err := pd.regMR(bufB, driver.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	const lenA, lenB = 3000, 6001 // packets of 4096, 4096 and 809 bytes
	want := append(append([]byte(nil), bufA[:lenA]...), bufB[:lenB]...)
	posted := make(chan error, 1)
	go func() {
		posted <- qp.PostSend([]driver.SendWR{{ID: 1, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
			SGL:        []driver.SGE{{Addr: mrA.Addr(), Length: lenA, LKey: mrA.LKey()}, {Addr: mrB.Addr(), Length: lenB, LKey: mrB.LKey()}},
			RemoteAddr: 0x1000, RKey: 0x1234}})
	}()
	<-entered // the send is now blocked in WriteBatch, holding the payload's regions
	closed := make(chan error, 1)
	go func() { closed <- mrB.Close() }()
	select {
	case err := <-closed:
		close(gate) // let the send finish, so the device can close
		t.Fatalf("MR.Close returned (%v) while a send was gathering from it", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("MR.Close still waiting after the send finished")
	}
	var got []byte
	ip := wire.IPHeader{Src: fuzzLocal.Addr(), Dst: fuzzPeer.Addr(), SrcPort: fuzzLocal.Port(), DstPort: wire.UDPPort, DF: true}
	for range 3 {
		pkt := <-sent
		var p wire.Packet
		if err := p.Parse(pkt, wire.MTU4096.Bytes()); err != nil {
			t.Fatal(err)
		}
		if !wire.CheckICRC(&ip, pkt) {
			t.Fatalf("packet PSN %#x: ICRC does not verify", uint32(p.BTH.PSN()))
		}
		got = append(got, p.Payload...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("payload differs: %d bytes, want %d", len(got), len(want))
	}
}
