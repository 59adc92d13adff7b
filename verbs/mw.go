package verbs

import "fmt"

// MWType is a memory window's type (ibv_mw_type).
type MWType uint8

const (
	// MWType1 windows are bound with QP.BindMW and stay bound until rebound.
	MWType1 MWType = 1
	// MWType2 windows are bound with a BIND_MW work request and revoked with LOCAL_INV
	// or by a peer's SEND_WITH_INV.
	MWType2 MWType = 2
)

// MW is a memory window (struct ibv_mw): remote access to part of a memory region,
// granted and revoked per request with its own rkey (IBTA 10.6.7).
type MW struct {
	pd   *PD
	impl mwImpl
	typ  MWType
}

// AllocMW allocates an unbound memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	impl, err := pd.impl.allocMW(t)
	if err != nil {
		return nil, fmt.Errorf("verbs: allocate memory window: %w", err)
	}
	return &MW{pd: pd, impl: impl, typ: t}, nil
}

// RKey returns the window's current rkey.
func (mw *MW) RKey() uint32 { return mw.impl.rkey() }

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// Close deallocates the window (ibv_dealloc_mw); its rkey stops working at once.
func (mw *MW) Close() error { return mw.impl.close() }

// MWBind says what a window grants (struct ibv_mw_bind_info): Length bytes at Addr of
// MR, which must have AccessMWBind, with the remote rights in Access.
type MWBind struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

// MWBindWR is the payload of a BIND_MW work request (type 2 windows): the window, the
// rkey it gets (IncRKey of its current one), and the binding.
type MWBindWR struct {
	MW   *MW
	RKey uint32
	MWBind
}

// IncRKey returns rkey with its low 8-bit key part incremented (ibv_inc_rkey): the rkey a
// type 2 window is given on its next bind.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// BindMW binds a type 1 window through the QP's send queue (ibv_bind_mw) and returns the
// rkey the window has once the bind executes. A zero Length unbinds. The completion
// (opcode BIND_MW) arrives on the send CQ if flags has SendSignaled, or with an error.
func (qp *QP) BindMW(mw *MW, id uint64, flags SendFlags, b MWBind) (uint32, error) {
	if mw.typ != MWType1 {
		return 0, fmt.Errorf("%w: BindMW binds type 1 windows; post a BIND_MW work request for type 2", ErrInvalidAttr)
	}
	return qp.impl.bindMW(mw.impl, id, flags, b)
}
