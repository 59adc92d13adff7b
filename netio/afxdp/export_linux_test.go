//go:build linux

package afxdp

// LastTxFrame is the UMEM address of the frame the last datagram sent through the ring
// was put in (tests only).
func LastTxFrame(c *Conn) uint64 {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.x.tx.desc(c.x.tx.local - 1).Addr
}
