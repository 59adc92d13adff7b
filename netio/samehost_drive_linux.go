//go:build linux

// The same-host shortcut driven by an event loop of the caller's (RingDriver): goverbs
// serve waits for its devices' sockets, their rings' eventfds and its clients' doorbells
// in one epoll_wait, and reads the rings and sockets with PollBatch.

package netio

import "golang.org/x/sys/unix"

// DriveFDs hands the receive wait to the caller's event loop (RingDriver): the socket
// and rxEv leave ep, which is in the netpoller, so that their readiness wakes no runtime
// thread; from now on a blocking ReadBatch waits in poll(2). Busy-poll Conns are driven
// by their pollers: -1, -1.
func (c *sameHostConn) DriveFDs() (sock, rings int) {
	if c.busy {
		return -1, -1
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if !c.driven && !c.closed.Load() {
		c.driven = true
		if c.udpArmed && c.epollCtl(unix.EPOLL_CTL_DEL, nil) == nil {
			c.udpArmed = false
		}
		c.inner.Unwatch()
		_ = c.eprc.Control(func(fd uintptr) { _ = unix.EpollCtl(int(fd), unix.EPOLL_CTL_DEL, c.rxEv.FD(), nil) })
	}
	return c.udpFD, c.rxEv.FD()
}

// RingsSleep tells the rings' producers that the reader waits (RingDriver).
func (c *sameHostConn) RingsSleep() bool { return c.sleep(*c.rx.Load()) }

// RingsAwake takes back RingsSleep's word, draining the eventfd if drain (RingDriver).
// A producer that took the word before this writes the eventfd once more: the caller
// sees it readable, and drains it then.
func (c *sameHostConn) RingsAwake(drain bool) {
	if drain {
		c.rxEv.Drain()
	}
	awake(*c.rx.Load())
}

// SocketReadable makes the next poll read the socket (RingDriver).
func (c *sameHostConn) SocketReadable() {
	if !c.udpKick.Load() {
		c.udpKick.Store(true)
	}
}
