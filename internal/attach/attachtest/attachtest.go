//go:build linux

// Package attachtest is test help for the shared-device daemon: a daemon serving one
// device on a free address, with a runtime directory of the test's own.
package attachtest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/goverbs/goverbs/internal/shm"

	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs/soft"
)

// Daemon serves one device, sw0, on a free address of testaddr's Attach block, and
// points XDG_RUNTIME_DIR at a directory of the test's (children inherit it). It closes
// when the test ends.
func Daemon(t *testing.T) (*server.Server, netip.Addr) {
	t.Helper()
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var srv *server.Server
	addr := testaddr.Open(t, testaddr.Attach, func(a netip.Addr) (netip.Addr, error) {
		s, err := server.New(server.Config{Devices: []soft.Config{{Name: "sw0", Addr: a}}})
		srv = s
		return a, err
	})
	t.Cleanup(func() { srv.Close() })
	return srv, addr
}

// Stat is what the daemon answers `goverbs stat` for its device on addr (the socket
// DIR/ADDR.sock, package control's protocol).
func Stat(t *testing.T, addr netip.Addr) string {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(shm.Dir(), addr.String()+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, "stat")
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
