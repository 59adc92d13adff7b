//go:build linux

package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The daemon answers `goverbs stat` for its devices on the socket a tool would have
// (DIR/ADDR.sock, package control's protocol: one request line, then text), listing
// the attached processes and their objects after the device's counters.

func (d *device) listenStat() net.Listener {
	path := filepath.Join(d.srv.cfg.Dir, d.addr.String()+".sock")
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		d.srv.log.Warn("stat socket in use; goverbs stat will not see this device", "path", path)
		return nil
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		d.srv.log.Warn("no stat socket", "err", err)
		return nil
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go d.answerStat(c)
		}
	}()
	return l
}

func (d *device) answerStat(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	fmt.Fprintf(c, "# goverbs serve (pid %d): device %s on %s\n", os.Getpid(), d.cfg.Name, d.addr)
	if strings.TrimSpace(req) != "stat" {
		fmt.Fprintf(c, "error: unknown request %q (the daemon answers stat)\n", strings.TrimSpace(req))
		return
	}
	d.writeStat(c)
}

// writeStat writes the device's counters (control.PrintStats' line), then a line per
// attached process and one per QP with its counters (control.PrintQPStats' line).
func (d *device) writeStat(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "link %s/1", d.cfg.Name)
	for _, c := range d.dev.Counters() {
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	fmt.Fprintln(w, b.String())
	if l := d.srv.loop; l != nil && d.driven {
		if l.drivesRings(d.eng) {
			fmt.Fprintln(w, "# event loop: reads the device's socket and its same-host rings")
		}
		if n, slower := l.lends(d.eng); n > 0 {
			fmt.Fprintf(w, "# event loop: the device's receive work went to a second thread %d times (a stream between devices of the daemon), %d of them given back as slower\n", n, slower)
		}
	}
	d.mu.Lock()
	ss := make([]*session, 0, len(d.sessions))
	for s := range d.sessions {
		ss = append(ss, s)
	}
	d.mu.Unlock()
	slices.SortFunc(ss, func(a, b *session) int { return a.pid - b.pid })
	// Own engines are asked all at once: each may take ownStatWait.
	answers := make(map[*session]*ownAnswer)
	for _, s := range ss {
		s.mu.Lock()
		o := s.ownStat
		s.mu.Unlock()
		if o != nil {
			a := &ownAnswer{done: make(chan struct{})}
			answers[s] = a
			go func() {
				defer close(a.done)
				a.text, a.err = o.ask()
			}()
		}
	}
	for _, s := range ss {
		s.mu.Lock()
		var pds, mrs, cqs, qps, srqs, ahs, mws, xrcds int
		// every QP, XRC targets included (s.qps holds only those with rings)
		var all []*qpObj
		for _, o := range s.objs {
			switch o := o.(type) {
			case *pdObj:
				pds++
			case *mrObj:
				mrs++
			case *cqObj:
				cqs++
			case *qpObj:
				qps++
				all = append(all, o)
			case *srqObj:
				srqs++
			case *ahObj:
				ahs++
			case *mwObj:
				mws++
			case *xrcdObj:
				xrcds++
			}
		}
		own := s.own != nil
		var first, last uint32
		if own {
			// Its objects are in its engine: the client lists them (ownstat.go). Objects
			// it made through the commands, in the daemon's engine, are few (the CM's
			// have none); their counts are printed only when there are some.
			first, last = s.own.QPNs()
			fmt.Fprintf(w, "client pid %d %s own_engine qpn %#06x-%#06x", s.pid, orDash(s.prog), first, last)
			if pds+mrs+cqs+qps+srqs+ahs+mws+xrcds > 0 {
				fmt.Fprintf(w, " daemon_engine pd %d mr %d cq %d qp %d srq %d ah %d mw %d xrcd %d", pds, mrs, cqs, qps, srqs, ahs, mws, xrcds)
			}
			fmt.Fprintln(w)
		} else {
			fmt.Fprintf(w, "client pid %d %s pd %d mr %d cq %d qp %d srq %d ah %d mw %d xrcd %d\n", s.pid, orDash(s.prog),
				pds, mrs, cqs, qps, srqs, ahs, mws, xrcds)
		}
		slices.SortFunc(all, func(a, b *qpObj) int { return int(a.qp.QPN()) - int(b.qp.QPN()) })
		for _, q := range all {
			c := q.qp.Counters()
			fmt.Fprintf(w, "qp %#x pid %d tx_pkts %d rx_pkts %d retransmits %d retry_timeouts %d rnr_nak_sent %d rnr_nak_rcvd %d "+
				"seq_nak_sent %d seq_nak_rcvd %d duplicate_request %d\n",
				q.qp.QPN(), s.pid, c.TxPackets, c.RxPackets, c.Retransmits, c.RetryTimeouts, c.RNRNakSent, c.RNRNakReceived,
				c.SeqNakSent, c.SeqNakReceived, c.DuplicateRequests)
		}
		s.mu.Unlock()
		if own {
			s.writeOwnStat(w, answers[s], first, last)
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return strings.ReplaceAll(s, " ", "_")
}
