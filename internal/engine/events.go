// Asynchronous events (ibv_get_async_event): their types and what one carries.

package engine

import "github.com/goverbs/goverbs/verbs/driver"

// AsyncEvent is one asynchronous event (struct ibv_async_event).
type AsyncEvent struct {
	Type driver.EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}
