package attach

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

// A Go client's own engine on the daemon's address (ENGINE, docs/attach-protocol.md):
// the daemon gives the process a socket bound to the device's address and port in the
// device's SO_REUSEPORT group, and a QPN range whose datagrams the kernel steers to that
// socket. The process runs an engine of its own on it, as an in-process device does, so
// its posts, completions and packets involve no daemon thread: an attached ping-pong is
// then two runnable threads, as in-process, where through the daemon's engine it is
// three. The daemon keeps QP1 and the CM, which package cm reaches through the session's
// commands as on any attached device (Command; the CM's QPs are user-managed, so the
// attributes CM_INIT_QP_ATTR gives are applied to this engine's QP), and keeps the
// session: goverbs stat lists the process (and asks it for its engine's QPs,
// ownstat_linux.go), and its end (the process closed the device,
// or died) takes the socket out of the group, so that the process's QPNs fall to the
// daemon's engine, which has no such QP, and its peers' retries run out.

// EnvOwnEngine is the environment variable that chooses, for Go programs, between an
// engine of the process's own on the daemon's address ("1") and the daemon's engine
// ("0"). Unset, a Go program runs its own (SetOwnEngineDefault): bench/attach.sh
// measured it at the in-process device's latency and bandwidth, where through the
// daemon's engine latency is about 3x. C clients without Go (capi/attach) always use
// the daemon's engine.
const EnvOwnEngine = "GOVERBS_ATTACH_ENGINE"

var ownEngineDefault atomic.Bool

func init() { ownEngineDefault.Store(true) }

// SetOwnEngineDefault sets the mode of devices attached from now on when
// GOVERBS_ATTACH_ENGINE is unset: on (the default), an engine of this process's own on
// the daemon's address; off, the daemon's engine. The drop-in C library built with Go
// (capi) sets it off, so that C programs keep the daemon's engine as the C flavour's
// do (XRC domains shared by file across processes).
func SetOwnEngineDefault(on bool) { ownEngineDefault.Store(on) }

func ownEngineWanted() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvOwnEngine))) {
	case "1", "on", "true", "yes":
		return true
	case "0", "off", "false", "no":
		return false
	}
	return ownEngineDefault.Load()
}

// OwnEngine reports whether c, a device's driver.Commander (verbs.Device.Commander), is
// an attached device whose verbs run in an engine of this process: then the process
// does the device's work itself, as with an in-process device, rather than wait for the
// daemon's (cmd/goverbs' tools spin on such a CQ as on an in-process one).
func OwnEngine(c driver.Commander) bool {
	_, ok := c.(*ownDevice)
	return ok
}

// ownDevice is an attached device whose verbs are an engine of this process. It is not
// a driver.GSI: QP1 is the daemon's.
type ownDevice struct {
	eng  *engine.Device
	sess *Device       // the session: commands (cm), the daemon's events, its death
	stat *net.UnixConn // goverbs stat's questions (ownstat_linux.go); nil from an older daemon

	events    chan driver.AsyncEvent
	closeOnce sync.Once
	fwd       sync.WaitGroup
}

// ownEngine asks the daemon for a socket and QPN range and starts an engine on them.
// It fails with errors.ErrUnsupported where the daemon offers none.
func (d *Device) ownEngine() (*ownDevice, error) {
	r, files, err := d.ctl.call(attach.OpEngine, func(w *attach.Writer) { w.U32(0) })
	if err != nil {
		return nil, err
	}
	first, last := r.U32(), r.U32()
	if err := want(&r, files, 1); err != nil {
		return nil, err
	}
	cfg := d.cfg
	cfg.Attach = false
	dev, err := soft.OpenFile(cfg, files[0])
	files[0].Close() // the engine has its own descriptor; the daemon keeps one too
	if err != nil {
		return nil, err
	}
	eng, ok := dev.(*engine.Device)
	if !ok {
		dev.Close()
		return nil, errors.New("attach: the software provider did not give an engine")
	}
	if err := eng.SetQPNs(first, last); err != nil {
		eng.Close()
		return nil, fmt.Errorf("attach: the daemon's QPN range: %w", err)
	}
	o := &ownDevice{eng: eng, sess: d, events: make(chan driver.AsyncEvent, 64)}
	o.stat = d.statSocket(eng)
	o.fwd.Add(2)
	go o.forward(eng.Events(), false)
	go o.forward(d.Events(), true) // the daemon's: port events, and its death (device fatal)
	go func() {
		o.fwd.Wait()
		close(o.events)
	}()
	return o, nil
}

func (o *ownDevice) forward(from <-chan driver.AsyncEvent, daemon bool) {
	defer o.fwd.Done()
	for ev := range from {
		if daemon && ev.Type == driver.EventDeviceFatal {
			// The daemon is gone: its socket, index 0 of the group, with it, so the
			// kernel moved another into its place and the steering program no longer
			// says where this process's datagrams go. The engine stops (before the
			// program hears of it); its objects' calls fail from now on.
			o.eng.Close()
		}
		select {
		case o.events <- ev:
		default: // nobody reads events: they are lost, the device is not stalled
		}
	}
}

// Close stops the engine (its socket first) and then ends the session: the daemon
// takes the socket out of the group once this process holds it no more.
func (o *ownDevice) Close() error {
	var err error
	o.closeOnce.Do(func() {
		err = o.eng.Close()
		if o.stat != nil {
			o.stat.Close()
		}
		o.sess.Close()
	})
	return err
}

func (o *ownDevice) Query() driver.DeviceAttr                     { return o.eng.Query() }
func (o *ownDevice) QueryPort(p uint8) driver.PortAttr            { return o.eng.QueryPort(p) }
func (o *ownDevice) GIDTable(p uint8) []driver.GIDEntry           { return o.eng.GIDTable(p) }
func (o *ownDevice) AllocPD() (driver.PD, error)                  { return o.eng.AllocPD() }
func (o *ownDevice) Events() <-chan driver.AsyncEvent             { return o.events }
func (o *ownDevice) Counters() driver.Counters                    { return o.eng.Counters() }
func (o *ownDevice) Progress() bool                               { return o.eng.Progress() }
func (o *ownDevice) NewWaiter() driver.Waiter                     { return o.eng.NewWaiter() }
func (o *ownDevice) OpenXRCD(fd, oflags int) (driver.XRCD, error) { return o.eng.OpenXRCD(fd, oflags) }
func (o *ownDevice) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	return o.eng.CreateCQ(depth, notify)
}

// Command sends a command to the daemon (driver.Commander: package cm's rdma_cm).
func (o *ownDevice) Command(op uint16, req []byte) ([]byte, []*os.File, error) {
	return o.sess.Command(op, req)
}
