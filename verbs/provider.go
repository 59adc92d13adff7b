package verbs

// The provider seam. Every verbs object holds one of these interfaces and nothing else of
// its implementation, the way database/sql holds a driver.Conn: the software RoCEv2 device
// (soft.go) is one provider; a provider for hardware RNICs through libibverbs can be added
// beside it without changing a user's program. The verbs layer does what is common to all
// providers (argument checks, the QP state-transition table, object lifetimes); a provider
// does only what its device does.

type provider interface {
	devices() ([]DeviceInfo, error)
	open(info DeviceInfo) (deviceImpl, error)
}

type deviceImpl interface {
	close() error
	query() DeviceAttr
	queryPort(port uint8) PortAttr
	gids(port uint8) []GIDEntry
	allocPD() (pdImpl, error)
	createCQ(depth int) (cqImpl, error)
	events() <-chan asyncEvent
	counters() Counters
	progress() bool
}

type pdImpl interface {
	close() error
	regMR(buf []byte, access Access) (mrImpl, error)
	createQP(attr *QPInitAttr) (qpImpl, error)
	createSRQ(attr SRQAttr) (srqImpl, error)
	createAH(attr *AHAttr) (ahImpl, error)
	allocMW(t MWType) (mwImpl, error)
}

type mwImpl interface {
	close() error
	rkey() uint32
}

type mrImpl interface {
	close() error
	keys() (lkey, rkey uint32)
	addr() uint64
}

type cqImpl interface {
	close() error
	poll(wcs []WC) (int, error)
	resize(depth int) error
	depth() int
	requestNotify(solicitedOnly bool) error
	setHandler(func())
}

type qpImpl interface {
	close() error
	qpn() uint32
	state() QPState
	modify(attr *QPAttr, mask QPAttrMask) error
	query() QPAttr
	postSend(wrs []SendWR) error
	postRecv(wrs []RecvWR) error
	bindMW(mw mwImpl, id uint64, flags SendFlags, b MWBind) (uint32, error)
	counters() QPCounters
}

type srqImpl interface {
	close() error
	postRecv(wrs []RecvWR) error
	arm(limit uint32) error
	query() SRQAttr
}

type ahImpl interface{}

// asyncEvent is an event as a provider reports it; Device.Events maps the provider's
// objects back to the user's.
type asyncEvent struct {
	typ  EventType
	qp   qpImpl
	cq   cqImpl
	srq  srqImpl
	port uint8
}
