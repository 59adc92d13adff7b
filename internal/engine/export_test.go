package engine

import "sync"

// devices holds every device made in this test binary, by GID (test hosts have
// addresses of their own), for DebugQP.
var devices sync.Map

func init() { testHookNew = func(d *Device) { devices.Store(d.gid, d) } }

// DebugQP describes the transport state of QP qpn of the device with GID gid (the
// engine's DebugString), for tests that drive the engine through package verbs.
func DebugQP(gid [16]byte, qpn uint32) string {
	d, ok := devices.Load(gid)
	if !ok {
		return ""
	}
	qp := d.(*Device).lookupQP(qpn)
	if qp == nil {
		return ""
	}
	return qp.DebugString()
}

// RaceEnabled tells the external tests that allocation counts mean nothing (see
// raceEnabled).
const RaceEnabled = raceEnabled
