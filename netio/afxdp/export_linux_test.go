//go:build linux

package afxdp

import "unsafe"

// LastTxFrame is the UMEM address of the frame the last datagram sent through the ring
// was put in (tests only).
func LastTxFrame(c *Conn) uint64 {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.x.tx.desc(c.x.tx.local - 1).Addr
}

// UMEMStart is the address of the Conn's packet memory (tests only).
func UMEMStart(c *Conn) uintptr { return uintptr(unsafe.Pointer(&c.x.umem[0])) }
