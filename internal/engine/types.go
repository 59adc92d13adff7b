// The engine's own types: its address vector and QP attributes. The data-path types
// and enums (work requests, completions, SGEs, flags, states) are verbs/driver's, used
// as they are, so the caller's work requests and completions need no conversion.

package engine

import (
	"net/netip"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/wire"
)

// AH is an address vector: where a QP's packets go (IBTA 10.2.1, RoCEv2 Annex A17.4).
type AH struct {
	DGID         [16]byte
	Addr         netip.Addr // DGID as an IP address (IPv4 unmapped)
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	SGIDIndex    uint8
	Port         uint8
}

// QPAttr is struct ibv_qp_attr, the subset a RoCEv2 device uses.
type QPAttr struct {
	State           driver.QPState
	CurState        driver.QPState
	PathMTU         wire.MTU
	QKey            uint32
	RQPSN           wire.PSN
	SQPSN           wire.PSN
	DestQPN         uint32
	AccessFlags     driver.Access
	Cap             driver.QPCap
	AH              AH
	PKeyIndex       uint16
	Port            uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
}
