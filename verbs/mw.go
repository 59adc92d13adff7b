package verbs

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs/driver"
)

// MW is a memory window (struct ibv_mw): remote access to part of a memory region,
// granted and revoked per request with its own rkey (IBTA 10.6.7).
type MW struct {
	pd   *PD
	impl driver.MW
	typ  MWType
	life life
}

// AllocMW allocates an unbound memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	if err := pd.usable(); err != nil {
		return nil, err
	}
	impl, err := pd.impl.AllocMW(t)
	if err != nil {
		return nil, &opError{"allocate memory window", err}
	}
	return &MW{pd: pd, impl: impl, typ: t}, nil
}

// RKey returns the window's current rkey.
func (mw *MW) RKey() uint32 { return mw.impl.RKey() }

// DriverMW returns the provider's memory window, for the provider a BIND_MW work request
// reaches (package verbs/driver); programs have no use for it.
func (mw *MW) DriverMW() driver.MW {
	if mw == nil {
		return nil
	}
	return mw.impl
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// Close deallocates the window (ibv_dealloc_mw); its rkey stops working at once.
func (mw *MW) Close() error {
	if mw.pd.dev.closed.Load() {
		return errDeviceClosed
	}
	return mw.life.close(errMWClosed, mw.impl.Close)
}

// BindMW binds a type 1 window through the QP's send queue (ibv_bind_mw) and returns the
// rkey the window has once the bind executes. A zero Length unbinds. The completion
// (opcode BIND_MW) arrives on the send CQ if flags has SendSignaled, or with an error.
func (qp *QP) BindMW(mw *MW, id uint64, flags SendFlags, b MWBind) (uint32, error) {
	if err := qp.usable(); err != nil {
		return 0, err
	}
	if err := mw.pd.dev.usable(&mw.life, errMWClosed); err != nil {
		return 0, err
	}
	if mr, ok := b.MR.(*MR); ok && mr != nil {
		if err := mr.pd.dev.usable(&mr.life, errMRClosed); err != nil {
			return 0, err
		}
	}
	if mw.typ != MWType1 {
		return 0, fmt.Errorf("%w: BindMW binds type 1 windows; post a BIND_MW work request for type 2", ErrInvalidAttr)
	}
	return qp.impl.BindMW(mw.impl, id, flags, b)
}
