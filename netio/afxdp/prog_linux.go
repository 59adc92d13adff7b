//go:build linux

package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// XDP return codes (linux/bpf.h).
const (
	xdpPass = 2
)

// xdp_md field offsets (linux/bpf.h): data, data_end, rx_queue_index.
const (
	mdData       = 0
	mdDataEnd    = 4
	mdRxQueueIdx = 16
)

// steerProgram returns the XDP program that redirects to the XSKMAP entry of the
// receiving queue the UDP datagrams to local (one family: the address's), and passes
// everything else to the kernel.
//
// In C it would read:
//
//	if (data + eth + ip + udp > data_end) return XDP_PASS;
//	if (eth->h_proto != htons(ETH_P_IP)) return XDP_PASS;
//	if (ip->version_ihl != 0x45 || ip->protocol != IPPROTO_UDP) return XDP_PASS;
//	if (ip->frag_off & htons(0x3fff)) return XDP_PASS;            // fragments: the kernel's
//	if (ip->daddr != ADDR || udp->dest != htons(PORT)) return XDP_PASS;
//	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//
// (IPv6: ETH_P_IPV6, nexthdr UDP, the 16-byte daddr.) bpf_redirect_map's flags are the
// action when the map has no socket for the queue: XDP_PASS, so a datagram arriving on
// another queue reaches the kernel, which answers it as it would without the program.
// IPv4 with options and IPv6 with extension headers pass too: RoCEv2 sends neither.
//
// Loads from packet memory compare the bytes as they lie in the packet: a 16-bit load
// of the big-endian EtherType 0x0800 reads 0x0008 on a little-endian machine, so every
// constant is turned into the load's value with nativeEndian.
//
// miss is the action when the map has no socket for the queue: XDP_PASS in use; a test
// makes it XDP_DROP to tell the redirect path from the pass path (BPF_PROG_TEST_RUN has
// no socket to redirect to).
func steerProgram(xsks *ebpf.Map, local netip.AddrPort, miss int32) asm.Instructions {
	v6 := local.Addr().Is6() && !local.Addr().Is4In6()
	be16 := func(v uint16) int32 {
		var b [2]byte
		binary.BigEndian.PutUint16(b[:], v)
		return int32(nativeEndian.Uint16(b[:]))
	}
	word := func(b []byte) int32 { return int32(nativeEndian.Uint32(b)) }
	const pass = "pass"
	var ipLen int16 = ipv4HeaderLen
	etherType := uint16(etherTypeIPv4)
	if v6 {
		ipLen, etherType = ipv6HeaderLen, etherTypeIPv6
	}
	udpOff := ethHeaderLen + ipLen
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // ctx
		asm.LoadMem(asm.R2, asm.R6, mdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, mdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, int32(udpOff+udpHeaderLen)),
		asm.JGT.Reg(asm.R4, asm.R3, pass),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, be16(etherType), pass),
	}
	if v6 {
		d := local.Addr().As16()
		insns = append(insns,
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+6, asm.Byte), // next header
			asm.JNE.Imm(asm.R5, protoUDP, pass),
		)
		for i := 0; i < 16; i += 4 {
			insns = append(insns,
				asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+24+int16(i), asm.Word),
				asm.JNE.Imm32(asm.R5, word(d[i:i+4]), pass),
			)
		}
	} else {
		d := local.Addr().Unmap().As4()
		insns = append(insns,
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen, asm.Byte), // version, IHL
			asm.JNE.Imm(asm.R5, 0x45, pass),
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+9, asm.Byte), // protocol
			asm.JNE.Imm(asm.R5, protoUDP, pass),
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+6, asm.Half), // flags, fragment offset
			asm.And.Imm(asm.R5, be16(0x3fff)),
			asm.JNE.Imm(asm.R5, 0, pass),
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+16, asm.Word), // destination
			asm.JNE.Imm32(asm.R5, word(d[:]), pass),
		)
	}
	insns = append(insns,
		asm.LoadMem(asm.R5, asm.R2, udpOff+2, asm.Half), // destination port
		asm.JNE.Imm(asm.R5, be16(local.Port()), pass),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.LoadMem(asm.R2, asm.R6, mdRxQueueIdx, asm.Word),
		asm.Mov.Imm(asm.R3, miss),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol(pass),
		asm.Return(),
	)
	return insns
}

// steering is the loaded program, its socket map, and the link that attaches it.
type steering struct {
	xsks    *ebpf.Map
	prog    *ebpf.Program
	link    link.Link
	generic bool // attached in generic (SKB) mode
}

// loadSteering creates the XSKMAP (an entry per queue up to queue) and loads the program
// for local. It does not attach it.
func loadSteering(local netip.AddrPort, queue int) (*steering, error) {
	return loadSteeringMiss(local, queue, xdpPass)
}

func loadSteeringMiss(local netip.AddrPort, queue int, miss int32) (*steering, error) {
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "goverbs_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(queue + 1),
	})
	if err != nil {
		return nil, fmt.Errorf("afxdp: create XSKMAP: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "goverbs_steer",
		Type:         ebpf.XDP,
		Instructions: steerProgram(xsks, local, miss),
		License:      "Apache-2.0",
	})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("afxdp: load the XDP program: %w", err)
	}
	return &steering{xsks: xsks, prog: prog}, nil
}

// attach links the program to the interface: the driver's native XDP first (unless
// generic), then generic XDP. The link is a BPF link: the kernel detaches the program
// when the last reference to the link (this process's descriptor) goes, so a killed
// process leaves nothing attached.
func (s *steering) attach(ifindex int, generic bool) error {
	var err error
	if !generic {
		s.link, err = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: ifindex, Flags: link.XDPDriverMode})
		if err == nil {
			return nil
		}
	}
	l, gerr := link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: ifindex, Flags: link.XDPGenericMode})
	if gerr != nil {
		if err != nil {
			return fmt.Errorf("afxdp: attach XDP program: native: %v; generic: %w", err, gerr)
		}
		return fmt.Errorf("afxdp: attach XDP program (generic): %w", gerr)
	}
	s.link, s.generic = l, true
	return nil
}

// close detaches the program and releases the map and program.
func (s *steering) close() error {
	var errs []error
	if s.link != nil {
		errs = append(errs, s.link.Close())
	}
	errs = append(errs, s.prog.Close(), s.xsks.Close())
	return errors.Join(errs...)
}
