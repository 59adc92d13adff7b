package mad_test

import (
	"bytes"
	"io"
	"net/netip"
	"reflect"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/wire"
)

// capturedMAD is one MAD to or from QP1 in a golden capture.
type capturedMAD struct {
	n        int // record number, from 1
	src, dst netip.Addr
	mad      mad.MAD // own copy
}

// loadMADs reads the CM MADs of testdata/rxe2rxe_rdmacm_rping.pcap: Linux
// rping between two rxe devices, 10.77.0.2 (client) and 10.77.0.3 (server).
// Every UD packet to QP1 must be a UD SEND from QP1 with the GSI Q_Key.
func loadMADs(tb testing.TB) []capturedMAD {
	tb.Helper()
	r, f, err := pcap.Open("testdata/rxe2rxe_rdmacm_rping.pcap")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []capturedMAD
	for n := 1; ; n++ {
		_, pkt, err := r.NextIP()
		if err == io.EOF {
			return out
		}
		if err != nil {
			tb.Fatal(err)
		}
		ip, udp, err := wire.ParseIPUDP(pkt)
		if err != nil || ip.DstPort != wire.UDPPort {
			continue
		}
		var p wire.Packet
		if err := p.Parse(udp, 0); err != nil {
			tb.Fatalf("#%d: %v", n, err)
		}
		if p.BTH.DestQP() != mad.QPNGSI {
			continue
		}
		if p.BTH.Opcode() != wire.UDSendOnly || p.DETH.QKey() != mad.QKeyGSI ||
			p.DETH.SrcQP() != mad.QPNGSI || p.BTH.PKey() != mad.PKeyDefault {
			tb.Fatalf("#%d: %v qkey %#x srcqp %d pkey %#x", n, p.BTH.Opcode(), p.DETH.QKey(),
				p.DETH.SrcQP(), p.BTH.PKey())
		}
		out = append(out, capturedMAD{n, ip.Src, ip.Dst, mad.MAD(bytes.Clone(p.Payload))})
	}
}

// TestRxeRping decodes every CM MAD of the rping capture field by field and
// checks that re-encoding the decoded fields gives the captured bytes.
func TestRxeRping(t *testing.T) {
	client, server := netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.77.0.3")
	const (
		tid        = 0x00000002dcf2aeca
		clientComm = 0xcaaef2dc
		serverComm = 0x6731ca8d
		clientQPN  = 32
		serverQPN  = 28
	)
	mads := loadMADs(t)
	wantOrder := []mad.AttrID{mad.AttrREQ, mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP}
	if len(mads) != len(wantOrder) {
		t.Fatalf("%d MADs, want %d", len(mads), len(wantOrder))
	}
	for i, c := range mads {
		m, err := mad.ParseCM(c.mad)
		if err != nil {
			t.Fatalf("#%d: %v", c.n, err)
		}
		h := m.Header().Fields()
		want := mad.CMHeader(tid, wantOrder[i])
		if h != want {
			t.Errorf("#%d header %+v, want %+v", c.n, h, want)
		}
		fromClient := c.src == client && c.dst == server
		d := m.Data()
		switch h.AttrID {
		case mad.AttrREQ:
			if !fromClient {
				t.Errorf("REQ from %v", c.src)
			}
			f := mad.REQ(d).Fields()
			cma, err := mad.ParseCMAHeader(f.PrivateData)
			if err != nil {
				t.Fatal(err)
			}
			f.PrivateData = nil
			want := mad.REQFields{
				LocalCommID: clientComm, ServiceID: mad.ServiceID(mad.PortSpaceTCP, 7174),
				LocalCAGUID: 0x505400fffe770002, LocalQPN: clientQPN, ResponderResources: 1,
				InitiatorDepth: 1, RemoteCMResponseTimeout: 20, TransportServiceType: mad.TransportRC,
				StartingPSN: 9837510, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff,
				PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15,
				Primary: mad.Path{LocalLID: 0xffff, RemoteLID: 0xffff,
					LocalGID: client.As16(), RemoteGID: server.As16(), // ::ffff:10.77.0.x
					FlowLabel: 0xbd9b0, HopLimit: 64, LocalACKTimeout: 19},
			}
			if !reflect.DeepEqual(f, want) {
				t.Errorf("REQ\n got %+v\nwant %+v", f, want)
			}
			if got := cma.Fields(); got != (mad.CMAHeaderFields{Port: 0xe516, Src: client, Dst: server}) {
				t.Errorf("rdma_cm header %+v", got)
			}
			if p := mad.REQ(d).PrivateData()[mad.CMAHeaderLen:]; !bytes.Equal(p, make([]byte, len(p))) {
				t.Errorf("rping's connect private data is not empty: %x", p)
			}
		case mad.AttrREP:
			f := mad.REP(d).Fields()
			if fromClient || !bytes.Equal(f.PrivateData, make([]byte, mad.REPPrivateLen)) {
				t.Errorf("REP from %v, private data %x", c.src, f.PrivateData)
			}
			f.PrivateData = nil
			want := mad.REPFields{LocalCommID: serverComm, RemoteCommID: clientComm, LocalQPN: serverQPN,
				StartingPSN: 2666808, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15,
				RNRRetryCount: 7, LocalCAGUID: 0x505400fffe770003}
			if !reflect.DeepEqual(f, want) {
				t.Errorf("REP\n got %+v\nwant %+v", f, want)
			}
		case mad.AttrRTU:
			f := mad.RTU(d)
			if !fromClient || f.LocalCommID() != clientComm || f.RemoteCommID() != serverComm {
				t.Errorf("RTU from %v: %+v", c.src, f.Fields())
			}
		case mad.AttrDREQ:
			f := mad.DREQ(d)
			if !fromClient || f.LocalCommID() != clientComm || f.RemoteCommID() != serverComm ||
				f.RemoteQPN() != serverQPN {
				t.Errorf("DREQ from %v: %+v", c.src, f.Fields())
			}
		case mad.AttrDREP:
			f := mad.DREP(d)
			if fromClient || f.LocalCommID() != serverComm || f.RemoteCommID() != clientComm {
				t.Errorf("DREP from %v: %+v", c.src, f.Fields())
			}
		}
		if got := reencode(t, m); !bytes.Equal(got, c.mad) {
			t.Errorf("#%d %v re-encodes differently:\n got %x\nwant %x", c.n, h.AttrID, got, []byte(c.mad))
		}
	}
}
