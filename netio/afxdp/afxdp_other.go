//go:build !linux

package afxdp

import (
	"net/netip"

	"github.com/goverbs/goverbs/netio"
)

// Conn is an AF_XDP socket; on this OS there are none (Open returns ErrNotSupported).
type Conn struct{}

// Open returns ErrNotSupported: AF_XDP is Linux's.
func Open(opts Options) (*Conn, error) { return nil, ErrNotSupported }

func (*Conn) ReadBatch([]netio.Message) (int, error)  { return 0, ErrNotSupported }
func (*Conn) WriteBatch([]netio.Message) (int, error) { return 0, ErrNotSupported }
func (*Conn) LocalAddr() netip.AddrPort               { return netip.AddrPort{} }
func (*Conn) SourceAddr() netip.AddrPort              { return netip.AddrPort{} }
func (*Conn) Caps() netio.Caps                        { return netio.Caps{} }
func (*Conn) Close() error                            { return ErrNotSupported }

// Mode is ModeCopy: there is no socket.
func (*Conn) Mode() Mode { return ModeCopy }

// Info is empty: there is no socket.
func (*Conn) Info() Info { return Info{} }

// Stats are zero.
func (*Conn) Stats() Stats { return Stats{} }
