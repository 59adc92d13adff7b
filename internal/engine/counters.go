// Counters: the device's statistics (every dropped packet under the reason it was
// dropped for) and each QP's.

package engine

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Counters are the device's statistics, in the spirit of `rdma statistic` for rxe. Every
// dropped packet is counted under the reason it was dropped for.
type Counters struct {
	TxPackets, TxBytes atomic.Uint64
	RxPackets, RxBytes atomic.Uint64

	Retransmits       atomic.Uint64 // packets sent again by go-back-N
	RetryTimeouts     atomic.Uint64 // retransmission timer expiries
	RNRNakSent        atomic.Uint64
	RNRNakReceived    atomic.Uint64
	SeqNakSent        atomic.Uint64
	SeqNakReceived    atomic.Uint64
	DuplicateRequest  atomic.Uint64
	ImpliedNak        atomic.Uint64 // a later ACK or response showed a READ/atomic response was lost
	DuplicateResponse atomic.Uint64 // READ responses and ACKs for PSNs already acknowledged

	ICRCErrors           atomic.Uint64 // dropped: no IPv4 ID or checksum makes the ICRC match
	ICRCRecovered        atomic.Uint64 // verified after solving for a peer's non-zero IPv4 Identification
	Malformed            atomic.Uint64 // dropped: wire.Packet.Parse refused it
	BadPKey              atomic.Uint64
	NoQP                 atomic.Uint64 // dropped: no such destination QP
	BadQPState           atomic.Uint64 // dropped: QP not in a state that accepts the packet
	BadTransport         atomic.Uint64 // dropped: opcode of another transport than the QP's
	BadAddress           atomic.Uint64 // dropped: source/destination do not match the QP's path
	BadQKey              atomic.Uint64
	OutOfSequence        atomic.Uint64 // dropped: UC/RC packet not at the expected PSN
	GhostResponse        atomic.Uint64 // dropped: response or ACK for nothing outstanding
	AccessErrors         atomic.Uint64 // remote requests refused for key, bounds or rights
	NoRecvWQE            atomic.Uint64 // dropped: UD/UC message with no receive WQE posted
	CNPReceived          atomic.Uint64 // RoCEv2 CNPs (Annex A17.9.3), counted with or without congestion control
	CNPSent              atomic.Uint64 // CNPs sent for CE-marked packets (congestion.go)
	CNPSuppressed        atomic.Uint64 // CE-marked packets that asked for no CNP: one had left within the CNP interval
	ECNCEReceived        atomic.Uint64 // packets for a QP that arrived with ECN Congestion Experienced
	RateCuts             atomic.Uint64 // DCQCN rate decreases applied to a QP
	PaceWaits            atomic.Uint64 // times a requester ran out of its paced budget with work left
	OOOKept              atomic.Uint64 // requests kept beyond a gap (selective repeat)
	SelectiveRetransmits atomic.Uint64 // packets resent because a SACK showed them missing
	McastPackets         atomic.Uint64 // multicast packets accepted for a joined group, before each member's checks
	CQOverflows          atomic.Uint64
	SendErrors           atomic.Uint64 // the socket refused a datagram
	EventsLost           atomic.Uint64
	// XRC targets' requests refused (NAKed as invalid, Annex A14): the XRCETH named no
	// XRC SRQ, or one of another domain.
	XRCBadSRQN         atomic.Uint64
	XRCDomainViolation atomic.Uint64
}

// Each calls f for every counter with its name, in a fixed order. The names follow
// `rdma statistic` for rxe where rxe has the counter.
func (c *Counters) Each(f func(name string, v uint64)) {
	f("sent_pkts", c.TxPackets.Load())
	f("sent_bytes", c.TxBytes.Load())
	f("rcvd_pkts", c.RxPackets.Load())
	f("rcvd_bytes", c.RxBytes.Load())
	f("retransmits", c.Retransmits.Load())
	f("retry_timeouts", c.RetryTimeouts.Load())
	f("send_rnr_nak", c.RNRNakSent.Load())
	f("rcvd_rnr_nak", c.RNRNakReceived.Load())
	f("out_of_seq_nak_sent", c.SeqNakSent.Load())
	f("rcvd_seq_err", c.SeqNakReceived.Load())
	f("duplicate_request", c.DuplicateRequest.Load())
	f("implied_nak", c.ImpliedNak.Load())
	f("duplicate_response", c.DuplicateResponse.Load())
	f("rcvd_icrc_err", c.ICRCErrors.Load())
	f("icrc_ipid_recovered", c.ICRCRecovered.Load())
	f("malformed_drop", c.Malformed.Load())
	f("bad_pkey_drop", c.BadPKey.Load())
	f("no_qp_drop", c.NoQP.Load())
	f("bad_qp_state_drop", c.BadQPState.Load())
	f("bad_transport_drop", c.BadTransport.Load())
	f("bad_address_drop", c.BadAddress.Load())
	f("bad_qkey_drop", c.BadQKey.Load())
	f("out_of_sequence", c.OutOfSequence.Load())
	f("ghost_response_drop", c.GhostResponse.Load())
	f("remote_access_err", c.AccessErrors.Load())
	f("no_recv_wqe_drop", c.NoRecvWQE.Load())
	f("rcvd_cnp", c.CNPReceived.Load())
	f("sent_cnp", c.CNPSent.Load())
	f("cnp_suppressed", c.CNPSuppressed.Load())
	f("ecn_ce_rcvd", c.ECNCEReceived.Load())
	f("rate_cuts", c.RateCuts.Load())
	f("pace_waits", c.PaceWaits.Load())
	f("ooo_kept", c.OOOKept.Load())
	f("selective_retransmits", c.SelectiveRetransmits.Load())
	f("rcvd_mcast_pkts", c.McastPackets.Load())
	f("cq_overflow", c.CQOverflows.Load())
	f("send_err", c.SendErrors.Load())
	f("async_events_lost", c.EventsLost.Load())
	f("xrc_bad_srqn", c.XRCBadSRQN.Load())
	f("xrc_domain_violation", c.XRCDomainViolation.Load())
}

// Counters returns a snapshot of the per-QP statistics.
func (qp *QP) Counters() driver.QPCounters {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.Stats
}

// Counters returns a snapshot of the device's counters, by name (Each's order).
func (d *Device) Counters() driver.Counters {
	var out driver.Counters
	d.counters.Each(func(name string, v uint64) { out = append(out, driver.Counter{Name: name, Value: v}) })
	if d.cc.Enabled {
		out = append(out, driver.Counter{Name: "cc_rate_min_mbps", Value: d.minRateMbps()})
	}
	// The backend's own counters (AF_XDP's mode and drops), when its Conn has them.
	if cn, ok := netio.AsCounting(d.conn); ok {
		cn.EachCounter(func(name string, v uint64) { out = append(out, driver.Counter{Name: name, Value: v}) })
	}
	// Which path the device's datagrams take: the same-host shortcut's counters, when
	// its Conn has one (netio.ListenSameHost), so that stat and --stats show it.
	if s, ok := netio.SameHostStatsOf(d.conn); ok {
		out = append(out,
			driver.Counter{Name: "samehost_peers", Value: uint64(s.Peers)},
			driver.Counter{Name: "samehost_tx_pkts", Value: s.TxPackets},
			driver.Counter{Name: "samehost_rx_pkts", Value: s.RxPackets},
			driver.Counter{Name: "samehost_corrupt", Value: s.Corrupt},
			driver.Counter{Name: "samehost_ring_full", Value: s.RingFull},
			driver.Counter{Name: "samehost_refused", Value: s.Fallbacks},
			driver.Counter{Name: "samehost_lent_tx_pkts", Value: s.LentTx},
			driver.Counter{Name: "samehost_lent_rx_pkts", Value: s.LentRx},
			driver.Counter{Name: "samehost_unlent", Value: s.Unlent})
	}
	return out
}

// minRateMbps is the lowest current DCQCN rate among the device's connected QPs, in Mb/s
// (a gauge, not a count: the slowest sender is the one congestion is holding back); the
// line rate when none is throttled.
func (d *Device) minRateMbps() uint64 {
	d.qpMu.RLock()
	qps := slices.Collect(maps.Values(d.qps))
	d.qpMu.RUnlock()
	low := uint64(d.cc.LineRate / 1e6)
	for _, qp := range qps {
		if qp.typ == driver.QPTypeUD {
			continue
		}
		if r := qp.rateMbps(); r > 0 && r < low {
			low = r
		}
	}
	return low
}
