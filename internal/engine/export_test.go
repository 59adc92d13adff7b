package engine

import (
	"sync"
	"weak"
)

// devices holds every device made in this test binary, by GID (test hosts have
// addresses of their own), for DebugQP. Weakly: a closed device's buffers must not
// outlive it for the rest of the tests.
var devices sync.Map // [16]byte → weak.Pointer[Device]

func init() { testHookNew = func(d *Device) { devices.Store(d.gid, weak.Make(d)) } }

// deviceOf returns the live device with GID gid, or nil.
func deviceOf(gid [16]byte) *Device {
	w, ok := devices.Load(gid)
	if !ok {
		return nil
	}
	return w.(weak.Pointer[Device]).Value()
}

// DebugQP describes the transport state of QP qpn of the device with GID gid (the
// engine's DebugString), for tests that drive the engine through package verbs.
func DebugQP(gid [16]byte, qpn uint32) string {
	d := deviceOf(gid)
	if d == nil {
		return ""
	}
	qp := d.lookupQP(qpn)
	if qp == nil {
		return ""
	}
	return qp.DebugString()
}

// PreferLoans makes the device with GID gid ask its same-host senders in this process
// for loans (Device.PreferCopies(false)), as goverbs serve's loop does.
func PreferLoans(gid [16]byte) bool {
	d := deviceOf(gid)
	if d == nil {
		return false
	}
	d.PreferCopies(false)
	return true
}

// RaceEnabled tells the external tests that allocation counts mean nothing (see
// raceEnabled).
const RaceEnabled = raceEnabled

// InjectCNP hands QP qpn of the device with GID gid a CNP, as if one had arrived
// (inputCNP), for tests that need a throttled QP without a marking network.
func InjectCNP(gid [16]byte, qpn uint32) bool {
	d := deviceOf(gid)
	if d == nil {
		return false
	}
	d.inputCNP(d.lookupQP(qpn))
	return true
}

// AlarmSets reports how many times the doorbell's alarm of the device with GID gid was
// set, and false if the device is gone or has no alarm.
func AlarmSets(gid [16]byte) (int64, bool) {
	d := deviceOf(gid)
	if d == nil {
		return 0, false
	}
	b := &d.doorbell
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.alarm == nil {
		return 0, false
	}
	return alarmSets(b.alarm), true
}
