// What the kernel's rdma_cm reports, in Go: its event types, an event as the CM
// keeps it, the parameters a connection carries, and the errors its statuses mean.

package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// cmEvent is an rdma_cm event type; the values are enum rdma_cm_event_type's
// (<rdma/rdma_cma.h>, checked when the cgo side compiles).
type cmEvent int

const (
	evAddrResolved cmEvent = iota
	evAddrError
	evRouteResolved
	evRouteError
	evConnectRequest
	evConnectResponse
	evConnectError
	evUnreachable
	evRejected
	evEstablished
	evDisconnected
	evDeviceRemoval
	evMulticastJoin
	evMulticastError
	evAddrChange
	evTimewaitExit
)

var cmEventNames = [...]string{"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
	"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST",
	"RDMA_CM_EVENT_CONNECT_RESPONSE", "RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED",
	"RDMA_CM_EVENT_DEVICE_REMOVAL", "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
	"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT"}

// String is rdma_event_str's text.
func (e cmEvent) String() string {
	if e >= 0 && int(e) < len(cmEventNames) {
		return cmEventNames[e]
	}
	return fmt.Sprintf("RDMA_CM_EVENT_UNKNOWN(%d)", int(e))
}

// kevent is an rdma_cm event, copied out of librdmacm's before it was acknowledged.
type kevent struct {
	kind   cmEvent
	status int     // event->status: an IB REJ reason for REJECTED, else 0 or -errno
	tok    uint64  // the id's token; for CONNECT_REQUEST, the new id's
	listen uint64  // CONNECT_REQUEST: the listening id's token
	priv   []byte  // the message's private data, as long as the event said (at most 255)
	param  kparam  // CONNECT_REQUEST and CONNECT_RESPONSE: the peer's rdma_conn_param
	ud     udParam // ESTABLISHED of a UD id, MULTICAST_JOIN: rdma_ud_param
	// CONNECT_REQUEST: the new id's addresses.
	local, remote netip.AddrPort
}

// kparam is struct rdma_conn_param without the private data.
type kparam struct {
	responderResources, initiatorDepth uint8
	retryCount, rnrRetryCount          uint8
	srq                                bool
	qpn                                uint32
}

// udParam is struct rdma_ud_param without the private data: where to send.
type udParam struct {
	ah   verbs.AHAttr
	qpn  uint32
	qkey uint32
}

// err is what an event that ends a handshake means, in the errors the software CM
// gives for the same outcome; nil for the events that do not end one.
func (e *kevent) err() error {
	switch e.kind {
	case evRejected:
		// On IB and RoCE the status is the REJ's reason (8: no listener, 28: the
		// consumer refused). A negative one is the kernel's own failure.
		if e.status > 0 && e.status <= 0xffff {
			return &RejectError{Reason: mad.Reason(e.status), PrivateData: fit(e.priv, mad.RejectPrivateLen)}
		}
		return fmt.Errorf("%w: %w", ErrRejected, errnoOf(e.status))
	case evUnreachable:
		if e.status == -int(syscall.ETIMEDOUT) || e.status == 0 {
			return ErrTimeout
		}
		return fmt.Errorf("cm: peer unreachable: %w", errnoOf(e.status))
	case evAddrError, evRouteError:
		what := "address"
		if e.kind == evRouteError {
			what = "route"
		}
		// No answer (ARP, neighbour discovery) is the software CM's silent peer.
		if e.status == -int(syscall.ETIMEDOUT) {
			return fmt.Errorf("%w: %s resolution: %w", ErrTimeout, what, errnoOf(e.status))
		}
		return fmt.Errorf("cm: %s resolution failed: %w", what, errnoOf(e.status))
	case evConnectError:
		return fmt.Errorf("cm: connection failed: %w", errnoOf(e.status))
	case evMulticastError:
		return fmt.Errorf("cm: multicast join failed: %w", errnoOf(e.status))
	case evDisconnected:
		return ErrDisconnected
	case evDeviceRemoval:
		return fmt.Errorf("%w: the device was removed", ErrClosed)
	}
	return nil
}

// errnoOf is an event's status as an errno (the kernel reports -errno).
func errnoOf(status int) error {
	if status < 0 {
		status = -status
	}
	if status == 0 {
		return errors.New("no status")
	}
	return syscall.Errno(status)
}

// fit copies private data into a zeroed slice of the message field's length n, as
// the software CM reports it: longer input (a peer's or a kernel's mistake) is cut.
func fit(p []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, p)
	return out
}
