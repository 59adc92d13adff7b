// Command server is the passive half of a connection-manager example: it listens on a
// software RDMA device, takes one client's connection request, learns from the request's
// private data where the client's buffer is (address and rkey), receives the client's
// SEND and writes it back, upper-cased, with one RDMA WRITE WITH IMMEDIATE. No side
// channel: every parameter travels in the CM's REQ and REP.
//
//	go run ./examples/cmecho/server [-a 127.0.0.2] [-p 7471]
//	go run ./examples/cmecho/client [-a 127.0.0.2] [-I 127.0.0.3] [-p 7471]
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/verbs"
)

func main() {
	addr := flag.String("a", "127.0.0.2", "address of the software device to listen on")
	port := flag.Int("p", 7471, "port")
	flag.Parse()
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Addr: netip.MustParseAddr(*addr)})
	check(err)
	defer dev.Close()
	agent, err := cm.NewAgent(dev, nil)
	check(err)
	defer agent.Close()
	l, err := agent.Listen(uint16(*port), 0)
	check(err)
	fmt.Printf("listening on %v\n", l.Addr())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := l.Accept(ctx)
	check(err)
	// The client put its buffer's address and rkey in the REQ's private data.
	peerAddr, peerKey := binary.BigEndian.Uint64(req.PrivateData), binary.BigEndian.Uint32(req.PrivateData[8:])
	fmt.Printf("request from %v: buffer at %#x, rkey %#x\n", req.Remote, peerAddr, peerKey)

	pd, err := dev.AllocPD()
	check(err)
	cq, err := dev.CreateCQ(16, nil)
	check(err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(err)
	buf := make([]byte, 64)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	check(err)
	// The receive goes in before the connection is accepted, so the client's first SEND
	// finds it: the QP in INIT, which the CM takes from there.
	check(cm.InitQP(qp))
	check(qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{mr.SGE(0, len(buf))}}))

	conn, err := req.Accept(ctx, &cm.Param{QP: qp, PrivateData: []byte("welcome")})
	check(err)
	wc := wait(cq)
	msg := buf[:wc.ByteLen]
	fmt.Printf("received %q\n", msg)

	copy(buf, bytes.ToUpper(msg))
	check(qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{mr.SGE(0, len(msg))}, RemoteAddr: peerAddr, RKey: peerKey, Imm: uint32(len(msg))}))
	wait(cq)
	<-conn.Done() // the client disconnects when it has read the answer
	fmt.Println("client disconnected")
}

// wait returns the next successful completion.
func wait(cq *verbs.CQ) verbs.WC {
	wcs := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		n, err := cq.Poll(wcs)
		check(err)
		if n == 1 {
			if wcs[0].Status != verbs.WCSuccess {
				log.Fatalf("completion: %v", wcs[0].Status)
			}
			return wcs[0]
		}
	}
	log.Fatal("no completion")
	return verbs.WC{}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
