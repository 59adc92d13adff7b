package verbs

import "github.com/goverbs/goverbs/verbs/driver"

// ChannelServes reports whether ch's waiters serve its device themselves (the
// provider's driver.Leader), for the tests of package verbs_test.
func ChannelServes(ch *CompChannel) bool { return ch.lead != nil }

// MapQPEvent maps an event of type t about qp as the device's event pump does, and
// reports whether the event would be delivered.
func MapQPEvent(d *Device, qp *QP, t EventType) (AsyncEvent, bool) {
	return d.mapEvent(driver.AsyncEvent{Type: t, QP: qp.impl})
}
