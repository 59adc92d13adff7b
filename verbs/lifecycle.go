package verbs

import (
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs/driver"
)

// Object lifetimes are kept here, once for every provider, with libibverbs' rules and
// os.File's manners (see the package overview):
//
//   - After X.Close, every call of X that returns an error returns one matching
//     ErrClosed, and reaches no provider; so does a second Close.
//   - Device.Close closes everything made from the device (ibv_close_device releases
//     the context's resources); their calls then match ErrClosed too.
//   - Closing a PD, CQ, SRQ, MR or CompChannel that other objects still use fails with
//     ErrBusy and leaves it open (ibv_dealloc_pd and the others return EBUSY).
//
// The data path (QP.PostSend, QP.PostRecv, SRQ.PostRecv, CQ.Poll) pays one atomic load
// for this: Device.Close marks its QPs, CQs and SRQs closed itself, so those check only
// their own flag. The other objects check their device's flag as well.

// life is an object's open or closed state.
type life struct {
	mu     sync.Mutex  // serialises Close, so that a provider's Close runs once
	closed atomic.Bool // set once the object, or its device, is closed
}

// close runs the provider's close once: a second call, or one after the device closed,
// returns gone. A provider's refusal (ErrBusy) leaves the object open.
func (l *life) close(gone error, closeImpl func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return gone
	}
	if err := closeImpl(); err != nil {
		return err
	}
	l.closed.Store(true)
	return nil
}

// The errors of calls on closed objects, made once. A poll on a closed CQ returns one as
// it is; a post wraps it in a *PostError naming the request, which allocates.
var (
	errDeviceClosed  = driver.NewError(ErrClosed, "device is closed")
	errPDClosed      = driver.NewError(ErrClosed, "protection domain is closed")
	errMRClosed      = driver.NewError(ErrClosed, "memory region is closed")
	errMWClosed      = driver.NewError(ErrClosed, "memory window is closed")
	errAHClosed      = driver.NewError(ErrClosed, "address handle is closed")
	errCQClosed      = driver.NewError(ErrClosed, "completion queue is closed")
	errChannelClosed = driver.NewError(ErrClosed, "completion channel is closed")
	errQPClosed      = driver.NewError(ErrClosed, "QP is closed")
	errSRQClosed     = driver.NewError(ErrClosed, "shared receive queue is closed")
	errChannelBusy   = driver.NewError(ErrBusy, "completion channel is still used by a CQ")
)

// usable reports why an object of the device cannot be used: its own closing (gone), or
// the device's; nil while both are open.
func (d *Device) usable(l *life, gone error) error {
	switch {
	case l.closed.Load():
		return gone
	case d.closed.Load():
		return errDeviceClosed
	}
	return nil
}
