package control

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

func TestPrintStats(t *testing.T) {
	dev := testaddr.Open(t, testaddr.Goverbs, func(a netip.Addr) (*verbs.Device, error) {
		return verbs.OpenSoft(verbs.SoftConfig{Name: "st0", Addr: a})
	})
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16, nil)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	var all, nz, q bytes.Buffer
	PrintStats(&all, dev, false)
	PrintStats(&nz, dev, true)
	PrintQPStats(&q, qp)
	line := all.String()
	if !strings.HasPrefix(line, "link st0/1 sent_pkts 0 sent_bytes 0 rcvd_pkts 0 ") || !strings.Contains(line, " rcvd_icrc_err 0 ") ||
		strings.Count(line, "\n") != 1 {
		t.Fatalf("all counters: %q", line)
	}
	if nz.String() != "link st0/1\n" {
		t.Fatalf("nonzero counters of an idle device: %q", nz.String())
	}
	if !strings.HasPrefix(q.String(), fmt.Sprintf("qp %#x tx_pkts 0 rx_pkts 0 retransmits 0 ", qp.QPN())) {
		t.Fatalf("QP counters: %q", q.String())
	}
	t.Setenv(EnvStats, "1")
	if !StatsWanted(false) {
		t.Fatal("GOVERBS_STATS=1 not honoured")
	}
	t.Setenv(EnvStats, "0")
	if StatsWanted(false) || !StatsWanted(true) {
		t.Fatal("StatsWanted")
	}
}

func TestPathLine(t *testing.T) {
	c := func(kv ...any) verbs.Counters {
		var out verbs.Counters
		for i := 0; i < len(kv); i += 2 {
			out = append(out, verbs.Counter{Name: kv[i].(string), Value: uint64(kv[i+1].(int))})
		}
		return out
	}
	for _, tc := range []struct {
		cs   verbs.Counters
		want string
	}{
		{c("sent_pkts", 10), ""},
		{c("sent_pkts", 0, "samehost_tx_pkts", 0), ""},
		{c("sent_pkts", 10, "samehost_tx_pkts", 0), "path: UDP for all 10 datagrams sent (same-host shortcut on, no goverbs peer found on this host)"},
		{c("sent_pkts", 10, "samehost_tx_pkts", 10), "path: same-host shared memory for all 10 datagrams sent"},
		{c("sent_pkts", 10, "samehost_tx_pkts", 7), "path: same-host shared memory for 7 of 10 datagrams sent, UDP for the rest"},
	} {
		if got := PathLine(tc.cs); got != tc.want {
			t.Errorf("PathLine(%v) = %q, want %q", tc.cs, got, tc.want)
		}
	}
}
