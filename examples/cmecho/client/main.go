// Command client is the active half of the connection-manager example (see
// examples/cmecho/server): it connects through the CM, telling the server in the
// connect private data where its buffer is, sends one message and waits for the server
// to write it back.
//
//	go run ./examples/cmecho/client [-a 127.0.0.2] [-I 127.0.0.3] [-p 7471]
package main

import (
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
	server := flag.String("a", "127.0.0.2", "the server's address")
	local := flag.String("I", "127.0.0.3", "address of this side's software device")
	port := flag.Int("p", 7471, "port")
	flag.Parse()
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Addr: netip.MustParseAddr(*local)})
	check(err)
	defer dev.Close()
	agent, err := cm.NewAgent(dev, nil)
	check(err)
	defer agent.Close()

	pd, err := dev.AllocPD()
	check(err)
	cq, err := dev.CreateCQ(16, nil)
	check(err)
	sink := make([]byte, 64) // the server writes its answer here
	sinkMR, err := pd.RegMR(sink, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	check(err)
	msg := []byte("hello through the connection manager")
	msgMR, err := pd.RegMR(msg, 0)
	check(err)

	// The connect private data (up to 56 bytes) carries the sink's address and rkey.
	pdata := make([]byte, 12)
	binary.BigEndian.PutUint64(pdata, sinkMR.Addr())
	binary.BigEndian.PutUint32(pdata[8:], sinkMR.RKey())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := agent.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(*server), uint16(*port)), &cm.Param{
		PD: pd, QPInit: verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}},
		PrivateData: pdata,
	})
	check(err)
	fmt.Printf("connected to %v, which says %q\n", conn.RemoteAddr(), cstr(conn.PrivateData()))
	qp := conn.QP()

	// A WRITE WITH IMMEDIATE consumes a receive: it tells us when the answer is there.
	check(qp.PostRecv(verbs.RecvWR{ID: 1}))
	check(qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{msgMR.SGE(0, len(msg))}}))
	for {
		wc := wait(cq)
		if wc.Opcode == verbs.WCRecvRDMAWithImm {
			fmt.Printf("server wrote back %q\n", sink[:wc.Imm])
			break
		}
	}
	check(conn.Disconnect(ctx, nil))
	check(conn.Close())
}

// cstr is private data up to its first zero byte.
func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
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
