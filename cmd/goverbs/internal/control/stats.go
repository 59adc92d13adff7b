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
