//go:build linux

package server_test

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	vattach "github.com/goverbs/goverbs/verbs/attach"
	"github.com/goverbs/goverbs/verbs/soft"
)

// TestEngineCommand: ENGINE by hand, as a client in another language would send it: bad
// flags and a second ENGINE are refused, the socket is a UDP socket bound to the device's
// address and port 4791, and its range is one top byte (not the daemon's 0).
func TestEngineCommand(t *testing.T) {
	_, addr := daemon(t)
	r := dialRaw(t, addr)
	if _, fds, errno := r.call(attach.OpEngine, func(w *attach.Writer) { w.U32(1) }); errno != int32(unix.EINVAL) || len(fds) != 0 {
		t.Fatalf("ENGINE with flags 1: errno %d, %d fds, want EINVAL", errno, len(fds))
	}
	rep, fds, errno := r.call(attach.OpEngine, func(w *attach.Writer) { w.U32(0) })
	if errno != 0 || len(fds) != 1 {
		t.Fatalf("ENGINE: errno %d, %d fds", errno, len(fds))
	}
	defer unix.Close(fds[0])
	first, last := rep.U32(), rep.U32()
	if first>>16 == 0 || first&0xffff != 0 || last != first|0xffff || first>>16 == 0xff {
		t.Fatalf("ENGINE range %#x-%#x", first, last)
	}
	sa, err := unix.Getsockname(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok || in4.Port != 4791 || netip.AddrFrom4(in4.Addr) != addr {
		t.Fatalf("ENGINE socket bound to %+v, want %v:4791", sa, addr)
	}
	if _, _, errno := r.call(attach.OpEngine, func(w *attach.Writer) { w.U32(0) }); errno != int32(unix.EINVAL) {
		t.Fatalf("ENGINE twice: errno %d, want EINVAL", errno)
	}
}

// TestEngineOnSameHostRings: a device on the same-host rings heads a SO_REUSEPORT group
// all the same and answers ENGINE (its rings carry only the daemon's engine's QPNs,
// netio.SameHostOptions.Steered): a Go client that wants its own engine there gets it.
func TestEngineOnSameHostRings(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	addr := testaddr.Open(t, testaddr.Attach, func(a netip.Addr) (netip.Addr, error) {
		s, err := server.New(server.Config{Devices: []soft.Config{{Name: "sw0", Addr: a, SameHost: true}}})
		if err == nil {
			t.Cleanup(func() { s.Close() })
		}
		return a, err
	})
	r := dialRaw(t, addr)
	rep, fds, errno := r.call(attach.OpEngine, func(w *attach.Writer) { w.U32(0) })
	if errno != 0 || len(fds) != 1 {
		t.Fatalf("ENGINE on a same-host device: errno %d, %d fds", errno, len(fds))
	}
	unix.Close(fds[0])
	if first := rep.U32(); first>>16 == 0 {
		t.Fatalf("ENGINE range starts at %#x, the daemon's engine's", first)
	}
	t.Setenv("GOVERBS_ATTACH_ENGINE", "1")
	dev, err := verbs.OpenSoft(verbs.SoftConfig{Addr: addr, Attach: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if !vattach.OwnEngine(dev.Commander()) {
		t.Fatal("a Go client on a same-host device runs on the daemon's engine")
	}
	if _, err := dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
}
