//go:build linux

// Sending on the Linux UDP backend: sendmmsg of a batch, GSO runs (one UDP_SEGMENT send
// per up to MaxGSOSegments datagrams, falling back to single datagrams when the kernel
// refuses), the iovec gather of Message.Iov, and destination socket addresses.

package netio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

type sendScratch struct {
	hdrs  [batchSize]unix.Mmsghdr
	iovs  [2 * MaxIov]unix.Iovec // the headers' iovecs, in order
	niov  int                    // iovecs in use
	names [batchSize]unix.RawSockaddrInet6
	oob   [batchSize][cmsgSpace]byte
	owner [batchSize]int32 // message index of each header
	off   [batchSize]int32 // byte offset of each header's data in its message
	segs  [batchSize]int32 // datagrams carried by each header (GSO run or 1)
	gso   [batchSize]bool  // header carries a UDP_SEGMENT cmsg
	k     int              // headers filled
	i     int              // next header to send
	fn    func(fd uintptr) bool
	errno syscall.Errno // error for header i when fn stops early
}

// WriteBatch sends every message: a run with SegSize > 0 goes out as one GSO
// send per up to 64 segments when Caps().GSO, otherwise as separate
// datagrams. Datagrams the kernel refuses are skipped (see SendError). If a
// GSO send is refused (EIO, EINVAL, …) the run is resent as separate
// datagrams, and if those are accepted GSO is switched off for the Conn.
func (c *udpConn) WriteBatch(msgs []Message) (int, error) {
	t := traceSendStart()
	n, err := c.writeBatch(msgs)
	traceSendDone(t)
	return n, err
}

func (c *udpConn) writeBatch(msgs []Message) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w := &c.w
	var first *SendError
	skipped := 0
	fail := func(mi, datagrams int, err error) {
		skipped += datagrams
		if first == nil || mi < first.Index {
			first = &SendError{Index: mi, Addr: msgs[mi].Addr, Err: err}
		}
	}
	mi, off := 0, 0
	split := -1 // message index being resent without GSO after a refused GSO send
	splitProbe := false
	for mi < len(msgs) {
		// Fill headers from (mi, off).
		w.k, w.i = 0, 0
		w.niov = 0
		for w.k < batchSize && mi < len(msgs) {
			m := &msgs[mi]
			if len(m.Iov) > MaxIov {
				fail(mi, msgs[mi].NumSegments(), ErrTooManyIov)
				mi, off = mi+1, 0
				continue
			}
			if w.niov+max(len(m.Iov), 1) > len(w.iovs) {
				break // send these first
			}
			namelen, ok := c.putSockaddr(&w.names[w.k], m.Addr)
			if !ok {
				fail(mi, msgs[mi].NumSegments(), ErrAddressFamily)
				mi, off = mi+1, 0
				continue
			}
			rest := m.N - off
			size, segs, gso := rest, 1, false
			if ss := m.SegSize; ss > 0 && rest > ss {
				if c.gso.Load() && split != mi {
					segs = min(gsoRunSegments(ss, MaxGSOSegments, maxGSOBytes), (rest+ss-1)/ss)
					if segs > 1 {
						size = min(rest, segs*ss)
						gso = true
					} else {
						size, segs = ss, 1
					}
				} else {
					size = ss
				}
			}
			k := w.k
			first := w.niov
			w.fillIov(m, off, size)
			h := &w.hdrs[k].Hdr
			h.Name = (*byte)(unsafe.Pointer(&w.names[k]))
			h.Namelen = namelen
			h.Iov = &w.iovs[first]
			h.SetIovlen(w.niov - first)
			h.Flags = 0
			ctl := 0
			if gso {
				putSegmentCmsg(w.oob[k][:], uint16(m.SegSize))
				ctl = unix.CmsgSpace(2)
			}
			ecn := ECNNotECT
			if c.ecn {
				ecn = m.ECN
			}
			if ds := DSField(m.TrafficClass, ecn); ds != 0 {
				ctl += c.putTOSCmsg(w.oob[k][ctl:], ds)
			}
			if ctl > 0 {
				h.Control = &w.oob[k][0]
				h.SetControllen(ctl)
			} else {
				h.Control = nil
				h.SetControllen(0)
			}
			w.owner[k], w.off[k], w.segs[k], w.gso[k] = int32(mi), int32(off), int32(segs), gso
			w.k++
			off += size
			if off >= m.N {
				mi, off = mi+1, 0
			}
		}
		if w.k == 0 {
			break
		}
		// Send headers [i, k); stop at the first error to classify it.
		for w.i < w.k {
			w.errno = 0
			if err := c.snd.Write(w.fn); err != nil {
				c.clearSend()
				if first != nil {
					first.Skipped = skipped
				}
				if c.closed.Load() || errors.Is(err, net.ErrClosed) {
					err = net.ErrClosed
				}
				return int(w.owner[w.i]), fmt.Errorf("netio: write %v: %w", c.local, err)
			}
			if w.errno == 0 {
				break
			}
			h := w.i
			owner := int(w.owner[h])
			if w.gso[h] && gsoRefused(w.errno) {
				// Resend this message from this header on, without GSO.
				split, splitProbe = owner, true
				mi, off = owner, int(w.off[h])
				w.k = h
				break
			}
			if splitProbe && owner == split {
				splitProbe = false // split resend failed too: the datagram, not GSO, is the problem
			}
			fail(owner, int(w.segs[h]), w.errno)
			w.i++
		}
		if splitProbe && w.i > 0 && int(w.owner[0]) == split {
			// A split resend of a refused GSO run went through: GSO is broken here.
			c.gso.Store(false)
			splitProbe = false
		}
	}
	c.clearSend()
	if first != nil {
		first.Skipped = skipped
		return len(msgs), first
	}
	return len(msgs), nil
}

func (c *udpConn) clearSend() {
	for j := range c.w.niov {
		c.w.iovs[j].Base = nil
	}
	c.w.niov = 0
}

// fillIov appends the iovecs for bytes [off, off+size) of m: one for Buf, or the
// pieces of the Iov slices that cover the range.
func (w *sendScratch) fillIov(m *Message, off, size int) {
	put := func(b []byte) {
		v := &w.iovs[w.niov]
		v.Base = nil
		if len(b) > 0 {
			v.Base = &b[0]
		}
		v.SetLen(len(b))
		w.niov++
	}
	if m.Iov == nil {
		put(m.Buf[off : off+size])
		return
	}
	start := w.niov
	for _, v := range m.Iov {
		if size == 0 {
			break
		}
		if off >= len(v) {
			off -= len(v)
			continue
		}
		n := min(len(v)-off, size)
		put(v[off : off+n])
		off, size = 0, size-n
	}
	if w.niov == start {
		put(nil) // an empty datagram still needs its header
	}
}

// sendFn sends headers [i, k) and advances i; it stops with errno set at the
// first header the kernel refuses, and returns false (wait) on EAGAIN.
func (c *udpConn) sendFn(fd uintptr) bool {
	w := &c.w
	for w.i < w.k {
		n, errno := sendmmsg(fd, w.hdrs[w.i:w.k])
		switch errno {
		case 0:
			w.i += n
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			w.errno = errno
			return true
		}
	}
	return true
}

// gsoRefused reports whether a GSO send failed because of GSO itself
// (no checksum offload: EIO; size/segment limits: EINVAL; old kernels).
func gsoRefused(e syscall.Errno) bool {
	return e == unix.EIO || e == unix.EINVAL || e == unix.ENOPROTOOPT || e == unix.EOPNOTSUPP
}

func putSegmentCmsg(b []byte, size uint16) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = size
}

// putTOSCmsg writes the control message that sends a datagram with the DS
// field ds (DSCP and ECN, DSField): IP_TOS for an IPv4 socket, IPV6_TCLASS for
// an IPv6 one, each an int. It returns the space used.
func (c *udpConn) putTOSCmsg(b []byte, ds uint8) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	if c.v6 {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = int32(ds)
	return unix.CmsgSpace(4)
}

// putSockaddr encodes ap for the socket's family; it reports false when the
// family cannot be reached from this socket.
func (c *udpConn) putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort) (uint32, bool) {
	a := ap.Addr()
	port := ap.Port()
	if !c.v6 {
		if !a.Is4() && !a.Is4In6() {
			return 0, false
		}
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		p := (*[2]byte)(unsafe.Pointer(&s4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		s4.Addr = a.Unmap().As4()
		s4.Zero = [8]byte{}
		return unix.SizeofSockaddrInet4, true
	}
	if !a.Is6() || a.Is4In6() {
		return 0, false // IPV6_V6ONLY
	}
	sa.Family = unix.AF_INET6
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	sa.Flowinfo = 0
	sa.Addr = a.As16()
	sa.Scope_id = 0
	if z := a.Zone(); z != "" {
		if id, err := strconv.Atoi(z); err == nil {
			sa.Scope_id = uint32(id)
		} else if ifi, err := net.InterfaceByName(z); err == nil {
			sa.Scope_id = uint32(ifi.Index)
		}
	}
	return unix.SizeofSockaddrInet6, true
}

// sendmmsg is a raw syscall, as recvmmsg is (see there).
func sendmmsg(fd uintptr, hs []unix.Mmsghdr) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), unix.MSG_DONTWAIT, 0, 0)
	return int(n), e
}
