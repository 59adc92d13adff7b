package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/goverbs/goverbs/wire"
)

// A sender lays out headers, copies the payload behind them, pads, and
// appends the ICRC for the IP header the datagram will travel in.
func Example() {
	ip := wire.IPHeader{
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		SrcPort: 0xc001, DstPort: wire.UDPPort, DF: true, // ID 0, as goverbs sends
	}
	h := wire.Headers{
		BTH:   wire.BTHFields{Opcode: wire.RCSendOnlyImm, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 100},
		ImmDt: 0xdeadbeef,
	}
	buf := make([]byte, 2048)
	hl := h.Encode(buf)
	n := copy(buf[hl:], "hello")
	n = wire.Finish(buf, hl, n)
	wire.PutICRC(&ip, buf, n)
	pkt := buf[:n+wire.ICRCLen]

	// The receiver parses once, then checks the ICRC.
	var p wire.Packet
	if err := p.Parse(pkt, wire.MTU1024.Bytes()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Op.Name, p.BTH.PSN(), p.BTH.PadCnt(), fmt.Sprintf("%#x", p.ImmDt.Imm()), string(p.Payload), wire.CheckICRC(&ip, pkt))
	fmt.Println(p.Op.Flags.Has(wire.ConsumesRecvWQE), p.Op.Flags.Has(wire.CanAckReq))
	// Output:
	// RC_SEND_ONLY_WITH_IMMEDIATE 100 3 0xdeadbeef hello true
	// true true
}

func ExampleSyndrome() {
	for _, s := range []wire.Syndrome{
		wire.ACKSyndrome(wire.CreditsInvalid),
		wire.RNRNAKSyndrome(14),
		wire.NAKSyndrome(wire.NAKPSNSeqError),
	} {
		fmt.Printf("%#02x %v\n", uint8(s), s)
	}
	fmt.Println(wire.RNRTimerDuration(14))
	// Output:
	// 0x1f ACK credits=31
	// 0x2e RNR NAK timer=14
	// 0x60 NAK PSN sequence error
	// 1.28ms
}
