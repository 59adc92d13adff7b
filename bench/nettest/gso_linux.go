package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpGSOBW is the socket layer's ceiling for datagrams the size of RoCEv2 packets: the
// client sends runs of SIZE-byte datagrams, as many as fit in 64 KiB, with one UDP GSO
// send each (a UDP_SEGMENT control message on WriteMsgUDP, as quic-go sends); the
// receiver reads them with UDP GRO, so that both sides pay the socket layer once per run
// rather than once per datagram, which is what goverbs' device does. The row counts what
// arrived, per second of sending.
//
// With --zerocopy the client asks for MSG_ZEROCOPY (SO_ZEROCOPY on the socket) and reaps
// the kernel's completion notifications from the socket's error queue, counting the sends
// the kernel reports it copied after all (SO_EE_CODE_ZEROCOPY_COPIED): on loopback and
// veth, where the receiver is on the same host, that is every one of them.
func udpGSOBW(o options) error {
	if o.serving() {
		return udpGSOCount(o)
	}
	row, err := udpGSOSend(o)
	if err == nil {
		emit(row)
	}
	return err
}

// udpGSOSend is udp_gso_bw's client: it sends for o.dur and returns the row.
func udpGSOSend(o options) (map[string]float64, error) {
	ctl, err := dialTCP(o)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(o.local()), net.UDPAddrFromAddrPort(o.remote()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := newGSOSender(c, o.size, o.zerocopy)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for time.Since(start) < o.dur {
		if err := s.send(); err != nil {
			return nil, err
		}
	}
	el := time.Since(start)
	if o.zerocopy {
		s.reapUntilDone(2 * time.Second)
	}
	got, err := exchangeCounts(ctl, s.sent)
	if err != nil {
		return nil, err
	}
	row := map[string]float64{"bytes": float64(o.size), "run_bytes": float64(len(s.run)),
		"sent_mib_s":   float64(s.sent) / el.Seconds() / (1 << 20),
		"bw_avg_mib_s": float64(got) / el.Seconds() / (1 << 20)}
	if o.zerocopy {
		row["zerocopy_sends"] = float64(s.sends)
		row["zerocopy_completed"] = float64(s.completed)
		row["zerocopy_copied"] = float64(s.copied)
	}
	return row, nil
}

// gsoSender sends one run per call. Its run is a fixed buffer: a MSG_ZEROCOPY send lets
// the kernel keep referring to the pages until it says it is done, and rewriting them
// meanwhile would change what goes out, but the content here is never rewritten.
type gsoSender struct {
	c         *net.UDPConn
	raw       syscall.RawConn
	run       []byte
	oob       []byte
	zerocopy  bool
	sent      int64 // bytes handed to the kernel
	sends     uint32
	completed uint32 // MSG_ZEROCOPY sends the kernel has reported done
	copied    uint32 // of those, the ones it copied after all
	errq      [256]byte
}

// newGSOSender prepares runs of seg-byte datagrams (parse has checked that one fits).
func newGSOSender(c *net.UDPConn, seg int, zerocopy bool) (*gsoSender, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	// UDP GSO carries at most 64 segments and 64 KiB of payload in one send.
	n := max(1, min(64, 65000/seg))
	s := &gsoSender{c: c, raw: raw, run: make([]byte, n*seg), oob: make([]byte, unix.CmsgSpace(2)), zerocopy: zerocopy}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&s.oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(s.oob[unix.CmsgLen(0):], uint16(seg))
	if zerocopy {
		var serr error
		if err := raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1)
		}); err != nil {
			return nil, err
		}
		if serr != nil {
			return nil, fmt.Errorf("SO_ZEROCOPY: %v", serr)
		}
	}
	return s, nil
}

// send sends one run: through WriteMsgUDP, or with MSG_ZEROCOPY through the descriptor
// (the net package has no way to pass send flags). A zero-copy send the kernel cannot
// take now (ENOBUFS: its notifications use up the socket's option memory) waits for
// notifications to be reaped. A send refused with ECONNREFUSED (an earlier datagram
// found no server yet) sent nothing and is not counted, either way.
func (s *gsoSender) send() error {
	if !s.zerocopy {
		_, _, err := s.c.WriteMsgUDP(s.run, s.oob, nil)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
		case err != nil:
			return err
		default:
			s.sent += int64(len(s.run))
		}
		return nil
	}
	var serr error
	err := s.raw.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgN(int(fd), s.run, s.oob, nil, unix.MSG_ZEROCOPY)
		return serr != unix.EAGAIN
	})
	switch {
	case err != nil:
		return err
	case serr == unix.ENOBUFS || serr == unix.ECONNREFUSED:
	case serr != nil:
		return serr
	default:
		s.sent += int64(len(s.run))
		s.sends++
	}
	s.reap()
	return nil
}

// reap reads the zero-copy notifications queued now. Each covers a range of sends, by
// their sequence numbers (ee_info to ee_data), and says whether the kernel copied them.
func (s *gsoSender) reap() {
	s.raw.Read(func(fd uintptr) bool {
		for {
			_, oobn, _, _, err := unix.Recvmsg(int(fd), nil, s.errq[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err != nil {
				return true
			}
			msgs, err := unix.ParseSocketControlMessage(s.errq[:oobn])
			if err != nil {
				continue
			}
			for _, m := range msgs {
				if len(m.Data) < int(unsafe.Sizeof(unix.SockExtendedErr{})) {
					continue
				}
				e := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
				if e.Origin != unix.SO_EE_ORIGIN_ZEROCOPY {
					continue
				}
				n := e.Data - e.Info + 1
				s.completed += n
				if e.Code&unix.SO_EE_CODE_ZEROCOPY_COPIED != 0 {
					s.copied += n
				}
			}
		}
	})
}

// reapUntilDone reaps until every zero-copy send has been reported, or for at most wait.
func (s *gsoSender) reapUntilDone(wait time.Duration) {
	for end := time.Now().Add(wait); s.completed < s.sends && time.Now().Before(end); {
		s.reap()
		time.Sleep(time.Millisecond)
	}
}

// udpGSOCount serves one udp_gso_bw client: it reads with UDP GRO on and counts bytes.
func udpGSOCount(o options) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(o.local()))
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("UDP_GRO: %v", serr)
	}
	oob := make([]byte, unix.CmsgSpace(2)) // the GRO run's segment size, unused
	return serveCount(o, c, func(buf []byte) (int64, error) {
		n, _, _, _, err := c.ReadMsgUDP(buf, oob)
		return int64(n), err
	})
}
