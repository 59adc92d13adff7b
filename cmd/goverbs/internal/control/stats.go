package control

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goverbs/goverbs/verbs"
)

// Counters at the end of a tool run, in the layout of iproute2's `rdma statistic show`
// for Linux rxe, so that the two read alike:
//
//	link sw0/1 sent_pkts 2006 rcvd_pkts 1003 ... rcvd_icrc_err 0 ...
//	qp 0x5e7a1c tx_pkts 1003 rx_pkts 1003 retransmits 0 ...
//
// A tool prints them when GOVERBS_STATS is set (to anything but "" or "0") or when its
// --stats flag is given: StatsWanted says whether to, and PrintStats and PrintQPStats
// write them. `goverbs stat` shows them while a tool runs (socket.go). The counters
// are those of verbs.Device.Counters and verbs.QP.Counters; a device's counters stay
// readable after it is closed.

// EnvStats is the environment variable that asks every tool for its counters.
const EnvStats = "GOVERBS_STATS"

// StatsWanted reports whether counters should be printed: flag is the tool's --stats.
func StatsWanted(flag bool) bool {
	v := os.Getenv(EnvStats)
	return flag || v != "" && v != "0"
}

// PrintStats writes dev's counters as one `rdma statistic show` line. With nonzero only,
// counters that are zero are left out.
func PrintStats(w io.Writer, dev *verbs.Device, nonzero bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "link %s/1", dev.Name())
	for _, c := range dev.Counters() {
		if nonzero && c.Value == 0 {
			continue
		}
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	fmt.Fprintln(w, b.String())
}

// PrintQPStats writes one QP's counters on one line.
func PrintQPStats(w io.Writer, qp *verbs.QP) {
	c := qp.Counters()
	fmt.Fprintf(w, "qp %#x tx_pkts %d rx_pkts %d retransmits %d retry_timeouts %d rnr_nak_sent %d rnr_nak_rcvd %d "+
		"seq_nak_sent %d seq_nak_rcvd %d duplicate_request %d\n",
		qp.QPN(), c.TxPackets, c.RxPackets, c.Retransmits, c.RetryTimeouts, c.RNRNakSent, c.RNRNakReceived,
		c.SeqNakSent, c.SeqNakReceived, c.DuplicateRequests)
}

// PathLine says which path a device's datagrams took, for the line a tool prints when it
// ends (issue 28: the tools say which path a run used): "" when the device has no
// same-host shortcut (its counters have no samehost_ entries), otherwise how many of the
// datagrams it sent crossed shared memory and how many the UDP socket carried; "" too
// when it sent nothing (a run that failed before its first packet took no path, and its
// error should be the one line it prints).
func PathLine(cs verbs.Counters) string {
	var sent, ring uint64
	on := false
	for _, c := range cs {
		switch c.Name {
		case "sent_pkts":
			sent = c.Value
		case "samehost_tx_pkts":
			ring, on = c.Value, true
		}
	}
	switch {
	case !on, sent == 0:
		return ""
	case ring == 0:
		return fmt.Sprintf("path: UDP for all %d datagrams sent (same-host shortcut on, no goverbs peer found on this host)", sent)
	case ring >= sent:
		return fmt.Sprintf("path: same-host shared memory for all %d datagrams sent", sent)
	}
	return fmt.Sprintf("path: same-host shared memory for %d of %d datagrams sent, UDP for the rest", ring, sent)
}
