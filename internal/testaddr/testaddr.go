// Package testaddr gives tests loopback addresses that no other process holds.
//
// A software device binds UDP port 4791 on its own address. Test binaries run at the
// same time (go test ./... runs packages in parallel, and several people share one
// machine), so a hard-coded address either fails with "address already in use" or,
// worse, reaches another process's device and passes for the wrong reason. Each
// package draws random addresses from its own 127.B.0.0/16 block, and an address
// counts as taken the moment a bind on it fails with EADDRINUSE: the kernel's bind is
// the only arbiter, so two processes never share a device address.
package testaddr

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/wire"
)

// A Block is the second octet of the 127.B.0.0/16 range one package's tests draw their
// addresses from. Separate blocks keep packages apart even in the moment between Free
// and the bind of the process it hands an address to.
type Block byte

// The blocks, one per package whose tests bind real sockets.
const (
	Engine   Block = 64 // internal/engine
	Verbs    Block = 65 // verbs
	Goverbs  Block = 66 // cmd/goverbs
	Examples Block = 67 // examples/...
	CM       Block = 68 // cm
	RDMANet  Block = 69 // rdmanet
	NetIO    Block = 70 // netio (its multicast groups; its sockets bind port 0)
	Attach   Block = 71 // verbs/attach and internal/attach/server (the shared-device daemon)
	Soft     Block = 72 // verbs/soft
)

// attempts bounds the search: with 64,516 addresses per block, failing this many draws
// in a row means something other than a busy address is wrong.
const attempts = 100

// Addr returns a random address of block b. Nothing is bound: it is for a test that
// needs an address no device of its own uses (a raw peer on an ephemeral port, a
// destination nobody answers).
func Addr(b Block) netip.Addr {
	// Hosts 1..254 of each /24: .0 and .255 look like network and broadcast addresses.
	return netip.AddrFrom4([4]byte{127, byte(b), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
}

// Open calls open with random addresses of block b until it succeeds, retrying only
// when the address is in use, and returns what open returned. open binds the address
// (for example verbs.OpenSoft), so the address is this test's once Open returns.
func Open[T any](tb testing.TB, b Block, open func(netip.Addr) (T, error)) T {
	tb.Helper()
	var err error
	for range attempts {
		var v T
		if v, err = open(Addr(b)); err == nil {
			return v
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	tb.Fatalf("testaddr: no free address in 127.%d.0.0/16: %v", b, err)
	panic("unreachable")
}

// Free returns an address of block b whose RoCEv2 port nobody had bound when Free
// returned, for a test that hands the address to another process (a tool under test,
// a helper binary) which binds it a moment later.
func Free(tb testing.TB, b Block) netip.Addr {
	tb.Helper()
	return Open(tb, b, func(a netip.Addr) (netip.Addr, error) {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, wire.UDPPort)))
		if err != nil {
			return a, err
		}
		return a, c.Close()
	})
}

// Group returns a random IPv4 multicast group of block b, 239.B.x.y (organisation-local
// scope, RFC 2365). Groups are shared by every socket on the host that joins them, and a
// software device receives a group at port 4791 like any other member: a random group
// per test keeps one test's multicast out of another's devices, as Addr keeps unicast
// apart.
func Group(b Block) netip.Addr {
	return netip.AddrFrom4([4]byte{239, byte(b), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
}
