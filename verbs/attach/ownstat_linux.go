package attach

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/engine"
	"golang.org/x/sys/unix"
)

// statSocket gives the daemon a socket on which goverbs stat asks this process for
// its engine's counters and QPs (ENGINE_STAT, attach.StatHdr), and answers on it until
// the socket closes. A daemon from before ENGINE_STAT refuses it: stat then lists the
// process without its objects, and the engine runs as well.
func (d *Device) statSocket(eng *engine.Device) *net.UnixConn {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	_, files, err := d.ctl.call(attach.OpEngineStat, nil, fds[1])
	unix.Close(fds[1])
	closeAll(files)
	f := os.NewFile(uintptr(fds[0]), "goverbs-engine-stat")
	if err != nil {
		f.Close()
		return nil
	}
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil
	}
	go answerStat(uc, eng)
	return uc
}

// answerStat answers each request with the engine's counters and one line per QP.
func answerStat(c *net.UnixConn, eng *engine.Device) {
	defer c.Close()
	req := make([]byte, 64)
	for {
		n, err := c.Read(req)
		if err != nil || n == 0 {
			return // closed: this process's device, or the daemon
		}
		if n != 8 {
			continue
		}
		seq := binary.LittleEndian.Uint64(req)
		text := statText(eng)
		for {
			chunk := text
			if len(chunk) > attach.StatChunk {
				// whole lines per message, where a line fits
				chunk = chunk[:attach.StatChunk]
				if i := strings.LastIndexByte(chunk, '\n'); i > 0 {
					chunk = chunk[:i+1]
				}
			}
			text = text[len(chunk):]
			msg := make([]byte, attach.StatHdr, attach.StatHdr+len(chunk))
			binary.LittleEndian.PutUint64(msg, seq)
			if text == "" {
				msg[8] = 1
			}
			msg = append(msg, chunk...)
			if _, err := c.Write(msg); err != nil {
				return
			}
			if text == "" {
				break
			}
		}
	}
}

// statText is the engine's line (its counters) and a line per QP (package control's
// PrintQPStats format).
func statText(eng *engine.Device) string {
	var b strings.Builder
	b.WriteString("engine")
	for _, c := range eng.Counters() {
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	b.WriteByte('\n')
	for _, qp := range eng.QPs() {
		c := qp.Counters()
		fmt.Fprintf(&b, "qp %#x tx_pkts %d rx_pkts %d retransmits %d retry_timeouts %d rnr_nak_sent %d rnr_nak_rcvd %d "+
			"seq_nak_sent %d seq_nak_rcvd %d duplicate_request %d\n",
			qp.QPN(), c.TxPackets, c.RxPackets, c.Retransmits, c.RetryTimeouts, c.RNRNakSent, c.RNRNakReceived,
			c.SeqNakSent, c.SeqNakReceived, c.DuplicateRequests)
	}
	return b.String()
}
