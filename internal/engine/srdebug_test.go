package engine

import (
	"fmt"
	"weak"
)

// SRDebug reports the instrumentation of QP qpn of the device with GID gid.
func SRDebug(gid [16]byte, qpn uint32) string {
	w, ok := devices.Load(gid)
	if !ok {
		return ""
	}
	d := w.(weak.Pointer[Device]).Value()
	if d == nil {
		return ""
	}
	s := fmt.Sprintf("rx: reads %d pkts %d wait %.1f ms; polls %d pkts %d one %d", d.dbg.reads.Load(), d.dbg.readPkts.Load(), float64(d.dbg.readNs.Load())/1e6, d.dbg.polls.Load(), d.dbg.pollPkts.Load(), d.dbg.pollOne.Load())
	if n := d.dbg.procs.Load(); n > 0 {
		s += fmt.Sprintf(" proc %.1fms/%d", float64(d.dbg.procNs.Load())/1e6, n)
	}
	qp := d.lookupQP(qpn)
	if qp == nil || qp.sr == nil {
		return s
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	g := &qp.sr.dbg
	s += fmt.Sprintf(" | req runs %d", g.runs)
	for i := range srdN {
		s += fmt.Sprintf(" %s %.1fms/%d", srdNames[i], float64(g.ns[i])/1e6, g.n[i])
	}
	if g.retxN > 0 {
		s += fmt.Sprintf(" | sack→retx %.1fµs×%d", float64(g.retxLat)/float64(g.retxN)/1e3, g.retxN)
	}
	if n := g.n[srdCap] + g.n[srdCapHole]; n > 0 {
		s += fmt.Sprintf(" | at cap: outstanding %.0f sacked %.0f", float64(g.capIF)/float64(n), float64(g.capSack)/float64(n))
	}
	s += fmt.Sprintf(" | hole %.1fms", float64(g.holeNs)/1e6)
	if g.rttN > 0 {
		s += fmt.Sprintf(" | rtt %.1fµs×%d", float64(g.rttSum)/float64(g.rttN)/1e3, g.rttN)
	}
	return s
}
