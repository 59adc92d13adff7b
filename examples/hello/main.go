// Command hello is the smallest complete goverbs program: two software RDMA devices
// on 127.0.0.2 and 127.0.0.3 in one process, an RC queue pair between them, one RDMA
// WRITE into the peer's memory and one SEND into a posted receive.
//
//	go run ./examples/hello [ADDR_A ADDR_B]
//
// With -d, both sides open one named device instead, and the device loops the traffic
// back: a kernel RDMA device in a build with the ibverbs tag (see the README), with -g
// the index of its IPv4 GID:
//
//	go run -tags ibverbs ./examples/hello -d rxe0 -g 1
package main

import (
	"flag"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// side is one "machine": a device, a protection domain, a CQ, a QP and a buffer.
type side struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
	gid verbs.GID
	idx int // the GID's index
}

// open opens the named device, or else a software device on addr.
func open(name, addr string, gidIndex int) *side {
	var dev *verbs.Device
	var err error
	if name != "" {
		dev, err = verbs.Open(name)
	} else {
		dev, err = verbs.OpenSoft(verbs.SoftConfig{Addr: netip.MustParseAddr(addr)})
	}
	if err != nil {
		log.Fatal(err)
	}
	s := &side{dev: dev, idx: gidIndex}
	if s.pd, err = dev.AllocPD(); err != nil {
		log.Fatal(err)
	}
	if s.cq, err = dev.CreateCQ(16, nil); err != nil {
		log.Fatal(err)
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if s.mr, err = s.pd.RegMR(make([]byte, 64), access); err != nil {
		log.Fatal(err)
	}
	if s.gid, err = dev.QueryGID(1, gidIndex); err != nil {
		log.Fatal(err)
	}
	return s
}

// connect moves the QP through INIT, RTR and RTS towards the peer's QP, as
// ibv_rc_pingpong does once the two sides have exchanged QPN, PSN and GID.
func (s *side) connect(peer *side) {
	must(s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1,
		AccessFlags: verbs.AccessRemoteWrite},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	must(s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024,
		DestQPN: peer.qp.QPN(), RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{DGID: peer.gid, SGIDIndex: uint8(s.idx), Port: 1, HopLimit: 64}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
			verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer))
	must(s.qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, Timeout: 14,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
			verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic))
}

// wait polls the CQ for one completion.
func (s *side) wait() verbs.WC {
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := s.cq.Poll(wc)
		must(err)
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				log.Fatalf("work request %d: %v", wc[0].ID, wc[0].Status)
			}
			return wc[0]
		}
		time.Sleep(10 * time.Microsecond)
	}
	log.Fatal("no completion within 5s")
	return verbs.WC{}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	name := flag.String("d", "", "open `DEVICE` (e.g. rxe0) for both sides instead of two software devices")
	gidIndex := flag.Int("g", 0, "the device's GID `INDEX`")
	flag.Parse()
	addrs := []string{"127.0.0.2", "127.0.0.3"}
	if flag.NArg() == 2 {
		addrs = flag.Args()
	}
	a, b := open(*name, addrs[0], *gidIndex), open(*name, addrs[1], *gidIndex)
	defer a.dev.Close()
	defer b.dev.Close()
	a.connect(b)
	b.connect(a)

	// RDMA WRITE: a puts bytes straight into b's registered buffer; b's CPU is not involved.
	msg := copy(a.mr.Buf(), "written by RDMA WRITE")
	must(a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, msg)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	a.wait()
	fmt.Printf("b's memory after WRITE: %q\n", b.mr.Buf()[:msg])

	// SEND: b posts a receive into the second half of its buffer, a sends into it.
	must(b.qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.mr.SGE(32, 32)}}))
	msg = copy(a.mr.Buf(), "hello over SEND")
	must(a.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, msg)}}))
	a.wait()
	wc := b.wait()
	fmt.Printf("b received %d bytes by SEND: %q\n", wc.ByteLen, b.mr.Buf()[32:32+wc.ByteLen])
}
