//go:build linux

package attach

import "github.com/goverbs/goverbs/verbs/driver"

// RecvPending is how many receives of q's ring the daemon has not taken yet.
func RecvPending(q driver.QP) int { return q.(*QP).rq.ring.Pending() }

// HangUpStat closes the stat socket of c, a device with its own engine: the process
// stops answering goverbs stat, its device goes on.
func HangUpStat(c driver.Commander) { c.(*ownDevice).stat.Close() }
