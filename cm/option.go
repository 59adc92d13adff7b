package cm

import (
	"fmt"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// Option is an rdma_cm id option, numbered as librdmacm's RDMA_OPTION_ID_* names
// (rdma_set_option at level RDMA_OPTION_ID). A Go program sets them in a Param (TOS,
// ACKTimeout) or a ListenConfig (ReuseAddr, AFOnly); a Service takes them by number
// (SetOption), as the C library passes them on.
type Option int

// The options.
const (
	OptionTOS        Option = 0 // the path's traffic class (uint8, RFC 2474's DS field)
	OptionReuseAddr  Option = 1 // bind to a port other ids hold, unless one listens (~SO_REUSEADDR)
	OptionAFOnly     Option = 2 // an IPv6 wildcard id takes IPv6 only (~IPV6_V6ONLY)
	OptionACKTimeout Option = 3 // the QP's local ACK timeout (uint8, at most 31)
)

func (o Option) String() string {
	switch o {
	case OptionTOS:
		return "TOS"
	case OptionReuseAddr:
		return "REUSEADDR"
	case OptionAFOnly:
		return "AFONLY"
	case OptionACKTimeout:
		return "ACK_TIMEOUT"
	}
	return fmt.Sprintf("option(%d)", int(o))
}

// ListenConfig is a listener's options, those rdma_set_option sets on the listening id
// before rdma_listen, as net.ListenConfig holds a socket's. The zero value gives
// Agent.Listen's listener.
type ListenConfig struct {
	// Backlog bounds the requests waiting for Accept and an answer (0: DefaultBacklog).
	Backlog int
	// ReuseAddr (RDMA_OPTION_ID_REUSEADDR) lets the listener bind a port that ids of
	// other connections hold, as long as none of them listens. A software device's
	// agent reserves no port for Dial's connections, so there a port conflicts only
	// with another listener whatever ReuseAddr says; on a kernel device (and on a
	// daemon's Service) it is the id's option.
	ReuseAddr bool
	// AFOnly (RDMA_OPTION_ID_AFONLY) keeps an IPv6 wildcard listener from taking IPv4
	// requests. An agent serves its device's one address, so it changes nothing but
	// on a kernel device, where it is the id's option.
	AFOnly bool
}

// Listen is Agent.Listen with lc's options.
func (lc *ListenConfig) Listen(a *Agent, port uint16) (*Listener, error) {
	if a.k != nil {
		return a.kernelListenWith(mad.PortSpaceTCP, port, lc)
	}
	return a.listen(mad.PortSpaceTCP, port, lc.Backlog)
}

// idOptions are a Service id's options (rdma_set_option's), each with whether it was
// set: an unset one leaves the CM's choice.
type idOptions struct {
	tos, timeout       uint8
	tosSet, timeoutSet bool
	reuseAddr, afOnly  bool
}

// SetOption is rdma_set_option at level RDMA_OPTION_ID: val is the option's value (a
// uint8 for TOS and ACK_TIMEOUT, a boolean int for REUSEADDR and AFONLY). TOS set
// before Connect goes in the REQ's path, and so into both sides' address vectors
// (InitQPAttr's RTR traffic class; the passive side takes the REQ's, as rdma_cm does on
// RoCE). ACK_TIMEOUT overrides the timeout InitQPAttr gives for RTS, and set before
// Connect goes in the REQ's path too (not on a UDP id: EINVAL). REUSEADDR matters at
// Bind and Listen; AFONLY is recorded (a device has one address family). Values out of
// range and options set in states rdma_cm refuses them in are EINVAL; other options
// ENOSYS.
func (s *Service) SetOption(tok uint64, opt Option, val uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[tok]
	if id == nil {
		return errNoID
	}
	switch opt {
	case OptionTOS:
		if val > 0xff {
			return fmt.Errorf("%w: TOS %d: %w", ErrBadOption, val, syscall.EINVAL)
		}
		id.opt.tos, id.opt.tosSet = uint8(val), true
	case OptionACKTimeout:
		if id.udp {
			return fmt.Errorf("cm: ACK timeout on a UDP id: %w", syscall.EINVAL) // no RC QP to time
		}
		if val > MaxACKTimeout {
			return fmt.Errorf("%w: ACK timeout %d (at most %d): %w", ErrBadOption, val, MaxACKTimeout, syscall.EINVAL)
		}
		id.opt.timeout, id.opt.timeoutSet = uint8(val), true
	case OptionReuseAddr:
		// As the kernel's rdma_cm: turned on on any id but a listener, off only before
		// a bind.
		if (val == 0 || id.state == stListening) && id.state != stIdle {
			return fmt.Errorf("cm: REUSEADDR %d in this state: %w", val, syscall.EINVAL)
		}
		id.opt.reuseAddr = val != 0
	case OptionAFOnly:
		if id.state != stIdle && id.state != stBound {
			return fmt.Errorf("cm: AFONLY after bind or resolve: %w", syscall.EINVAL)
		}
		id.opt.afOnly = val != 0
	default:
		return fmt.Errorf("%w: %v: %w", ErrBadOption, opt, syscall.ENOSYS)
	}
	return nil
}

// Notify is rdma_notify: the program saw event (an ibv_event_type number) on the id's
// QP. Communication established (IBV_EVENT_COMM_EST: the QP received its first packet
// in RTR) on a passive id waiting for the RTU establishes the connection, as the RTU
// would: ESTABLISHED follows, and the RTU, when it comes, is a duplicate. On an id
// established already it is EISCONN; in other states, and for other events (RoCE has
// no alternate path to migrate to), EINVAL, as the kernel's ib_cm answers.
func (s *Service) Notify(tok uint64, event verbs.EventType) error {
	if event != verbs.EventCommEst {
		return fmt.Errorf("cm: rdma_notify takes communication established, not %v: %w", event, syscall.EINVAL)
	}
	s.mu.Lock()
	id := s.ids[tok]
	switch {
	case id == nil:
		s.mu.Unlock()
		return errNoID
	case id.state == stEstablished:
		s.mu.Unlock()
		return fmt.Errorf("cm: established already: %w", syscall.EISCONN)
	case id.state != stAccepted:
		s.mu.Unlock()
		return errIDState
	}
	ic := id.ic
	s.mu.Unlock()
	a := s.a
	err := a.do(func(now time.Time) error { return a.cm.Establish(now, ic) })
	s.mu.Lock()
	switch {
	case s.ids[tok] != id:
		s.mu.Unlock()
		return errNoID // destroyed meanwhile
	case id.state == stEstablished:
		s.mu.Unlock()
		return fmt.Errorf("cm: established already: %w", syscall.EISCONN) // the RTU came meanwhile
	case err != nil || id.state != stAccepted:
		s.mu.Unlock()
		return fmt.Errorf("cm: the connection is gone: %w", syscall.EINVAL)
	}
	id.state = stEstablished
	ev := ServiceEvent{Kind: SvcEstablished, ID: tok, Local: id.local, Remote: id.remote}
	h := id.h
	s.mu.Unlock()
	h(ev)
	return nil
}
