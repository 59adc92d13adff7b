//go:build linux

package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
	"golang.org/x/sys/unix"
)

// A client's own engine holds its QPs, not the daemon: goverbs stat asks the client
// for them on a SOCK_SEQPACKET socket the client passed with ENGINE_STAT
// (attach.StatHdr), waits ownStatWait for the answer, and copies only the lines it
// expects (the engine's counters, QPs of the client's range), bounded in size, with
// the session's pid put in by the daemon: a client can make its own listing wrong,
// not another's.

const (
	ownStatWait  = 200 * time.Millisecond
	ownStatMax   = 1 << 20 // bytes of answer copied
	ownStatLine  = 4096    // longest line copied
	ownStatLines = 65537   // the engine's line and a QP per QPN of the range
)

// ownStat is the daemon's end of a client's stat socket.
type ownStat struct {
	mu     sync.Mutex // one ask at a time
	c      *net.UnixConn
	seq    uint64
	closed atomic.Bool
}

// engineStat takes the client's end of its stat socket (fds[0]).
func (s *session) engineStat(fds []int) error {
	if len(fds) != 1 {
		shm.CloseFDs(fds)
		return driver.NewError(driver.ErrInvalidAttr, "ENGINE_STAT carries one socket")
	}
	fd := fds[0]
	fail := func(msg string) error {
		unix.Close(fd)
		return driver.NewError(driver.ErrInvalidAttr, msg)
	}
	if s.own == nil {
		return fail("ENGINE_STAT before ENGINE")
	}
	if s.ownStat != nil {
		return fail("ENGINE_STAT twice")
	}
	typ, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	dom, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err1 != nil || err2 != nil || typ != unix.SOCK_SEQPACKET || dom != unix.AF_UNIX {
		return fail("ENGINE_STAT's descriptor is not an AF_UNIX SOCK_SEQPACKET socket")
	}
	f := os.NewFile(uintptr(fd), "goverbs-engine-stat")
	c, err := net.FileConn(f) // a descriptor of its own, non-blocking
	f.Close()
	if err != nil {
		return driver.NewError(driver.ErrInvalidAttr, err.Error())
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return driver.NewError(driver.ErrInvalidAttr, "ENGINE_STAT's descriptor is not a unix socket")
	}
	s.ownStat = &ownStat{c: uc}
	return nil
}

// close closes the socket at once (an ask under way fails): the session's end does
// not wait for a stat.
func (o *ownStat) close() {
	o.closed.Store(true)
	o.c.Close()
}

// ownAnswer is an ask's result.
type ownAnswer struct {
	text []byte
	err  error
	done chan struct{}
}

var errStatTimeout = errors.New("no answer in time")

// ask sends a request and returns the answer's text (its messages of this request's
// number, in order), at most ownStatMax bytes of it.
func (o *ownStat) ask() ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed.Load() {
		return nil, net.ErrClosed
	}
	o.seq++
	deadline := time.Now().Add(ownStatWait)
	o.c.SetDeadline(deadline)
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], o.seq)
	if _, err := o.c.Write(req[:]); err != nil {
		return nil, err
	}
	var out []byte
	buf := make([]byte, attach.StatHdr+attach.StatChunk)
	for {
		n, err := o.c.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = errStatTimeout
			}
			return nil, err
		}
		if n == 0 {
			return nil, io.EOF
		}
		if n < attach.StatHdr || binary.LittleEndian.Uint64(buf) != o.seq {
			continue // an answer to an earlier request that came too late
		}
		if len(out) < ownStatMax {
			out = append(out, buf[attach.StatHdr:n][:min(n-attach.StatHdr, ownStatMax-len(out))]...)
		}
		if buf[8] == 1 {
			return out, nil
		}
	}
}

// writeOwnStat writes the client's answer: "engine pid N COUNTERS", then "qp QPN pid N
// COUNTERS" per QP, as writeStat's own QP lines.
func (s *session) writeOwnStat(w io.Writer, a *ownAnswer, first, last uint32) {
	if a == nil {
		fmt.Fprintf(w, "# pid %d: the client's engine gave no stat socket (a client from before ENGINE_STAT)\n", s.pid)
		return
	}
	<-a.done
	text, err := a.text, a.err
	if err != nil {
		switch {
		case err == errStatTimeout:
			fmt.Fprintf(w, "# pid %d: the client's engine did not answer within %v\n", s.pid, ownStatWait)
		case errors.Is(err, io.EOF) || errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, net.ErrClosed):
			fmt.Fprintf(w, "# pid %d: the client's engine's stat socket is closed\n", s.pid)
		default:
			fmt.Fprintf(w, "# pid %d: the client's engine's stat socket: %v\n", s.pid, err)
		}
		return
	}
	lines, dropped := 0, 0
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		if out, ok := ownStatLineOut(line, s.pid, first, last); ok && lines < ownStatLines {
			fmt.Fprintln(w, out)
			lines++
		} else if len(line) > 0 {
			dropped++
		}
	}
	if dropped > 0 {
		fmt.Fprintf(w, "# pid %d: %d lines of the client's answer dropped (not an engine or QP line of its range)\n", s.pid, dropped)
	}
}

// ownStatLineOut checks one line of a client's answer and puts the pid in it.
func ownStatLineOut(line []byte, pid int, first, last uint32) (string, bool) {
	if len(line) > ownStatLine {
		return "", false
	}
	for _, c := range line {
		if c < 0x20 || c > 0x7e {
			return "", false
		}
	}
	f := strings.Fields(string(line))
	var pairs []string // NAME VALUE ...
	switch {
	case len(f) >= 1 && f[0] == "engine":
		pairs = f[1:]
	case len(f) >= 2 && f[0] == "qp":
		pairs = f[2:]
	default:
		return "", false
	}
	if len(pairs)%2 != 0 {
		return "", false
	}
	for i := 1; i < len(pairs); i += 2 {
		if _, err := strconv.ParseUint(pairs[i], 10, 64); err != nil {
			return "", false
		}
	}
	pidf := "pid " + strconv.Itoa(pid)
	if f[0] == "engine" {
		return "engine " + pidf + joinRest(pairs), true
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 32)
	if err != nil || !strings.HasPrefix(f[1], "0x") || uint32(n) < first || uint32(n) > last {
		return "", false
	}
	return fmt.Sprintf("qp %#x %s%s", n, pidf, joinRest(pairs)), true
}

func joinRest(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return " " + strings.Join(f, " ")
}
