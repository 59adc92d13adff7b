package engine

import (
	"testing"

	"github.com/goverbs/goverbs/netio/netiotest"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// TestWindowKeepsBytesInFlight: with no ACK coming back, the requester sends as many
// packets as its window and stops: 128 at path MTU 4096 (rxe's window), and at smaller
// MTUs as many as hold the same 512 KiB, so that a 1 KiB packet stream (the path MTU of
// a 1500-byte Ethernet) is not bound to a quarter of the bytes per round trip.
func TestWindowKeepsBytesInFlight(t *testing.T) {
	for _, tc := range []struct {
		mtu  wire.MTU
		want int
	}{{wire.MTU4096, 128}, {wire.MTU2048, 256}, {wire.MTU1024, 512}, {wire.MTU256, 2048}} {
		conn := netiotest.NewConn(fuzzLocal)
		conn.KeepWritten()
		dev, pd, _, qp := rcOnConn(t, "window", conn, wire.MTU4096, 16,
			driver.QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
		all := driver.AccessLocalWrite | driver.AccessRemoteWrite
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateInit, Port: 1, AccessFlags: all}, driver.QPAttrState|driver.QPAttrPort|driver.QPAttrPKeyIndex|driver.QPAttrAccessFlags))
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTR, AH: driver.AHAttr{DGID: AddrToGID(fuzzPeer.Addr()), Port: 1}, PathMTU: tc.mtu,
			DestQPN: fuzzPeerQPN, MinRNRTimer: 1},
			driver.QPAttrState|driver.QPAttrAV|driver.QPAttrPathMTU|driver.QPAttrDestQPN|driver.QPAttrRQPSN|driver.QPAttrMaxDestRdAtomic|driver.QPAttrMinRNRTimer))
		// A local ACK timeout of 4 s: nothing is resent while the test counts.
		must(t, qp.Modify(&driver.QPAttr{State: driver.QPStateRTS, SQPSN: fuzzSQPSN, Timeout: 20, RetryCnt: 3, RNRRetry: 3},
			driver.QPAttrState|driver.QPAttrSQPSN|driver.QPAttrTimeout|driver.QPAttrRetryCnt|driver.QPAttrRNRRetry|driver.QPAttrMaxQPRdAtomic))
		const size = 4 << 20
		mr, err := pd.regMR(make([]byte, size), driver.AccessLocalWrite)
		must(t, err)
		// One 4 MiB WRITE, more packets than any window; an isolated post sends what the
		// window allows before PostSend returns.
		must(t, qp.PostSend([]driver.SendWR{{Opcode: driver.WRRDMAWrite, RemoteAddr: 0x1000, RKey: 1,
			SGL: []driver.SGE{{Addr: mr.Addr(), Length: size, LKey: mr.LKey()}}}}))
		if got := len(conn.TakeWritten()); got != tc.want {
			t.Errorf("path MTU %d: %d packets sent unacknowledged, want %d", tc.mtu.Bytes(), got, tc.want)
		}
		dev.Close()
	}
}
