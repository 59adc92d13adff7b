package cm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// cm on an attached device (verbs/attach, `goverbs serve`): QP1 is the daemon's, which
// runs the device's rdma_cm for every process attached to it (cm.Service), as the
// kernel runs it for every process on a kernel device. The agent is then the kernel
// path's (kernel.go) over attachBackend, which speaks the attach protocol's rdma_cm
// commands (docs/attach-protocol.md, "rdma_cm") on the device's control socket and
// reads the events of one event channel: QPs are user-managed, moved with the
// attributes CM_INIT_QP_ATTR gives, as with librdmacm.

// attachProvider is verbs/attach's provider name (not imported: package verbs
// imports it, and cm needs only its devices' driver.Commander).
const attachProvider = "attach"

// newAttached makes the agent of dev when it is an attached device (ok true).
func newAttached(dev *verbs.Device, cfg *Config) (*Agent, bool, error) {
	if dev.Info().Provider != attachProvider {
		return nil, false, nil
	}
	cmd := dev.Commander()
	if cmd == nil {
		return nil, false, nil
	}
	b, err := openAttachBackend(cmd, dev)
	if err != nil {
		return nil, true, err
	}
	a, err := startKernelAgent(dev, b, cfg)
	return a, true, err
}

// attachBackend is kernelBackend over the attach protocol: tokens are the daemon's id
// handles.
type attachBackend struct {
	cmd  driver.Commander
	name string
	guid uint64
	ch   uint32
	ev   *net.UnixConn
	loop sync.WaitGroup

	// The ids alive, for the DEVICE_REMOVAL each gets when the daemon goes away.
	mu      sync.Mutex
	toks    map[uint64]struct{}
	closing bool
}

func openAttachBackend(cmd driver.Commander, dev *verbs.Device) (*attachBackend, error) {
	r, files, err := command(cmd, attach.OpCMCreateChannel, nil)
	if err != nil {
		return nil, fmt.Errorf("cm: the daemon's rdma_cm: %w", err)
	}
	ch := r.U32()
	if len(files) != 1 || r.Err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, errors.New("cm: malformed reply to CM_CREATE_CHANNEL")
	}
	fc, err := net.FileConn(files[0])
	files[0].Close()
	if err != nil {
		return nil, err
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, errors.New("cm: the event channel is not a unix socket")
	}
	return &attachBackend{cmd: cmd, name: dev.Name(), guid: dev.Query().NodeGUID, ch: ch, ev: uc,
		toks: map[uint64]struct{}{}}, nil
}

// command sends op with the payload build writes.
func command(cmd driver.Commander, op attach.Op, build func(w *attach.Writer)) (attach.Reader, []*os.File, error) {
	var w attach.Writer
	if build != nil {
		build(&w)
	}
	b, files, err := cmd.Command(uint16(op), w.B)
	return attach.Reader{B: b}, files, err
}

func (b *attachBackend) call(op attach.Op, tok uint64, build func(w *attach.Writer)) (attach.Reader, error) {
	r, files, err := command(b.cmd, op, func(w *attach.Writer) {
		w.U32(uint32(tok))
		if build != nil {
			build(w)
		}
	})
	for _, f := range files {
		f.Close()
	}
	return r, err
}

func (b *attachBackend) track(tok uint64, on bool) {
	b.mu.Lock()
	if on {
		b.toks[tok] = struct{}{}
	} else {
		delete(b.toks, tok)
	}
	b.mu.Unlock()
}

// start reads the event channel: each event goes to handle. Its end ends the loop;
// unless we closed it, the daemon is gone, and every id gets DEVICE_REMOVAL, as the
// kernel's rdma_cm reports a device that went away.
func (b *attachBackend) start(handle func(kevent)) {
	b.loop.Add(1)
	go func() {
		defer b.loop.Done()
		buf := make([]byte, attach.MaxMsg)
		for {
			n, err := b.ev.Read(buf)
			if err != nil || n == 0 {
				b.mu.Lock()
				var toks []uint64
				if !b.closing {
					for t := range b.toks {
						toks = append(toks, t)
					}
				}
				b.mu.Unlock()
				for _, t := range toks {
					handle(kevent{kind: evDeviceRemoval, tok: t})
				}
				return
			}
			e, ok := attach.ParseCMEvent(buf[:n])
			if !ok {
				continue
			}
			k := kevent{kind: cmEvent(e.Event), status: int(e.Status), tok: uint64(e.ID), listen: uint64(e.ListenID),
				priv: e.Param.PrivateData, local: e.Local, remote: e.Remote,
				param: kparam{responderResources: e.Param.ResponderResources, initiatorDepth: e.Param.InitiatorDepth,
					retryCount: e.Param.RetryCount, rnrRetryCount: e.Param.RNRRetryCount, srq: e.Param.SRQ,
					qpn: e.Param.QPN & 0xffffff}}
			if k.kind == evConnectRequest {
				b.track(k.tok, true)
			}
			if e.QKey != 0 { // UD: ESTABLISHED of a UDP id, MULTICAST_JOIN
				k.param = kparam{}
				k.ud = udParam{ah: e.AH, qpn: e.Param.QPN & 0xffffff, qkey: e.QKey}
			}
			handle(k)
		}
	}()
}

func (b *attachBackend) newID(udp bool) (uint64, error) {
	space := uint16(attach.PortSpaceTCP)
	if udp {
		space = attach.PortSpaceUDP
	}
	r, files, err := command(b.cmd, attach.OpCMCreateID, func(w *attach.Writer) {
		w.U32(b.ch)
		w.U16(space)
		w.U16(0)
		w.U64(0)
	})
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return 0, err
	}
	h := r.U32()
	if r.Err != nil || h == 0 {
		return 0, errors.New("cm: malformed reply to CM_CREATE_ID")
	}
	b.track(uint64(h), true)
	return uint64(h), nil
}

func (b *attachBackend) bind(tok uint64, addr netip.Addr) error {
	_, err := b.call(attach.OpCMBindAddr, tok, func(w *attach.Writer) { w.PutAddr(netip.AddrPortFrom(addr, 0)) })
	return err
}

func (b *attachBackend) join(tok uint64, group netip.Addr, sendOnly bool) error {
	_, err := b.call(attach.OpCMJoinMcast, tok, func(w *attach.Writer) {
		w.PutAddr(netip.AddrPortFrom(group, 0))
		if sendOnly {
			w.U8(1)
		} else {
			w.U8(0)
		}
	})
	return err
}

func (b *attachBackend) resolveAddr(tok uint64, src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	_, err := b.call(attach.OpCMResolveAddr, tok, func(w *attach.Writer) {
		w.U32(uint32(timeout.Milliseconds()))
		w.PutAddr(netip.AddrPortFrom(src, 0))
		w.PutAddr(dst)
	})
	return err
}

func (b *attachBackend) resolveRoute(tok uint64, timeout time.Duration) error {
	_, err := b.call(attach.OpCMResolveRoute, tok, func(w *attach.Writer) { w.U32(uint32(timeout.Milliseconds())) })
	return err
}

// device is the agent's own: the daemon's ids are all on the device it serves.
func (b *attachBackend) device(uint64) (string, uint64, error) { return b.name, b.guid, nil }

func (b *attachBackend) localAddr(tok uint64) netip.AddrPort {
	r, err := b.call(attach.OpCMQueryAddr, tok, nil)
	if err != nil {
		return netip.AddrPort{}
	}
	return r.Addr()
}

func (b *attachBackend) listen(tok uint64, addr netip.AddrPort, backlog int) (uint16, error) {
	r, err := b.call(attach.OpCMBindAddr, tok, func(w *attach.Writer) { w.PutAddr(addr) })
	if err != nil {
		return 0, err
	}
	got := r.Addr()
	if _, err := b.call(attach.OpCMListen, tok, func(w *attach.Writer) { w.U32(uint32(max(backlog, 0))) }); err != nil {
		return 0, err
	}
	return got.Port(), nil
}

func connParam(p *kparam, priv []byte) *attach.ConnParam {
	return &attach.ConnParam{ResponderResources: p.responderResources, InitiatorDepth: p.initiatorDepth,
		RetryCount: p.retryCount, RNRRetryCount: p.rnrRetryCount, SRQ: p.srq, QPN: p.qpn, PrivateData: priv}
}

func (b *attachBackend) connect(tok uint64, p *kparam, priv []byte) error {
	_, err := b.call(attach.OpCMConnect, tok, func(w *attach.Writer) { w.PutConnParam(connParam(p, priv)) })
	return err
}

func (b *attachBackend) accept(tok uint64, p *kparam, priv []byte) error {
	_, err := b.call(attach.OpCMAccept, tok, func(w *attach.Writer) { w.PutConnParam(connParam(p, priv)) })
	return err
}

func (b *attachBackend) reject(tok uint64, priv []byte) error {
	if len(priv) > attach.MaxPrivate {
		return ErrPrivateDataTooLong
	}
	_, err := b.call(attach.OpCMReject, tok, func(w *attach.Writer) {
		w.U8(uint8(len(priv)))
		w.Bytes(priv)
	})
	return err
}

func (b *attachBackend) establish(tok uint64) error {
	_, err := b.call(attach.OpCMEstablish, tok, nil)
	return err
}

func (b *attachBackend) setOption(tok uint64, opt Option, val uint32) error {
	_, err := b.call(attach.OpCMSetOption, tok, func(w *attach.Writer) {
		w.U32(uint32(opt))
		w.U32(val)
	})
	return err
}

func (b *attachBackend) disconnect(tok uint64) error {
	_, err := b.call(attach.OpCMDisconnect, tok, nil)
	return err
}

func (b *attachBackend) initQPAttr(tok uint64, state verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	r, err := b.call(attach.OpCMInitQPAttr, tok, func(w *attach.Writer) { w.U8(uint8(state)) })
	if err != nil {
		return verbs.QPAttr{}, 0, fmt.Errorf("cm: CM_INIT_QP_ATTR %v: %w", state, err)
	}
	mask := verbs.QPAttrMask(r.U32())
	attr := r.QPAttr()
	if r.Err != nil {
		return verbs.QPAttr{}, 0, errors.New("cm: malformed reply to CM_INIT_QP_ATTR")
	}
	return attr, mask, nil
}

func (b *attachBackend) destroy(tok uint64) {
	b.track(tok, false)
	b.call(attach.OpCMDestroyID, tok, nil)
}

// close destroys the channel (its ids are gone by now) and waits for the loop.
func (b *attachBackend) close() error {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	command(b.cmd, attach.OpCMDestroyChannel, func(w *attach.Writer) { w.U32(b.ch) })
	b.ev.Close()
	b.loop.Wait()
	return nil
}
