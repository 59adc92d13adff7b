package attach

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

// Device is a device attached to a daemon.
type Device struct {
	cfg  soft.Config
	ctl  ctl
	evc  *net.UnixConn
	db   *shm.Eventfd // the daemon's doorbell
	attr driver.DeviceAttr
	port driver.PortAttr
	gids []driver.GIDEntry

	events chan driver.AsyncEvent
	evDone chan struct{}
	dead   atomic.Bool // the daemon went away
	closed atomic.Bool

	mu   sync.Mutex
	objs map[uint32]any // QPs, CQs and SRQs by handle, for async events
}

func open(cfg soft.Config) (driver.Device, error) {
	path := attach.SocketPath(shm.Dir(), cfg.Addr)
	c, err := shm.Dial(path, 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: no goverbs serve daemon serves %s (%s): %v", driver.ErrUnavailable, cfg.Name, cfg.Addr, path, err)
	}
	d := &Device{cfg: cfg, ctl: ctl{c: c}, events: make(chan driver.AsyncEvent, 64), evDone: make(chan struct{}),
		objs: map[uint32]any{}}
	r, files, err := d.ctl.call(attach.OpHello, func(w *attach.Writer) {
		w.U32(attach.Version)
		w.U32(uint32(os.Getpid()))
		w.Str(filepath.Base(os.Args[0]))
	})
	if err == nil {
		err = want(&r, files, 2)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: attach: %w", cfg.Name, err)
	}
	fc, err := net.FileConn(files[0])
	files[0].Close()
	if err != nil {
		files[1].Close()
		c.Close()
		return nil, err
	}
	d.evc = fc.(*net.UnixConn)
	if d.db, err = doorbell(files[1]); err != nil {
		d.evc.Close()
		c.Close()
		return nil, err
	}
	if err := d.query(); err != nil {
		d.Close()
		return nil, err
	}
	go d.readEvents()
	if ownEngineWanted() {
		o, err := d.ownEngine()
		if err == nil {
			return o, nil
		}
		// The daemon offers none (an older daemon, same-host rings, another backend, a
		// kernel that refused the steering program) or could not: its engine serves.
		if d.gone() {
			d.Close()
			return nil, fmt.Errorf("%s: attach: %w", cfg.Name, err)
		}
	}
	return d, nil
}

// query reads what the device is once: its attributes, port and GIDs do not change.
func (d *Device) query() error {
	r, f, err := d.ctl.call(attach.OpQueryDevice, nil)
	if err != nil {
		return err
	}
	d.attr = r.DeviceAttr()
	if err := want(&r, f, 0); err != nil {
		return err
	}
	r, f, err = d.ctl.call(attach.OpQueryPort, func(w *attach.Writer) { w.U8(1) })
	if err != nil {
		return err
	}
	d.port = r.PortAttr()
	if err := want(&r, f, 0); err != nil {
		return err
	}
	r, f, err = d.ctl.call(attach.OpQueryGID, func(w *attach.Writer) { w.U8(1) })
	if err != nil {
		return err
	}
	n := r.U32()
	for i := uint32(0); i < n && r.Err == nil && i < 256; i++ {
		e := driver.GIDEntry{Index: int(r.U32())}
		r.Fixed(e.GID[:])
		e.Type = r.Str()
		d.gids = append(d.gids, e)
	}
	return want(&r, f, 0)
}

// readEvents turns the event socket's messages into async events. Its end means the
// daemon is gone (or we closed): the first is the device's fatal event.
func (d *Device) readEvents() {
	defer close(d.evDone)
	var b [attach.EventLen]byte
	for {
		n, err := d.evc.Read(b[:])
		if err != nil || n != attach.EventLen {
			if !d.closed.Load() {
				d.dead.Store(true)
				d.ctl.close()
				d.deliver(driver.AsyncEvent{Type: driver.EventDeviceFatal, Port: 1})
			}
			return
		}
		typ, kind, h := binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
		ev := driver.AsyncEvent{Type: driver.EventType(typ)}
		d.mu.Lock()
		o := d.objs[h]
		d.mu.Unlock()
		switch kind {
		case attach.EventPort:
			ev.Port = uint8(h)
		case attach.EventQP:
			q, ok := o.(*QP)
			if !ok {
				continue
			}
			ev.QP = q
		case attach.EventCQ:
			c, ok := o.(*CQ)
			if !ok {
				continue
			}
			ev.CQ = c
		case attach.EventSRQ:
			s, ok := o.(*SRQ)
			if !ok {
				continue
			}
			ev.SRQ = s
		default:
			continue
		}
		d.deliver(ev)
	}
}

func (d *Device) deliver(ev driver.AsyncEvent) {
	select {
	case d.events <- ev:
	default: // nobody reads events: they are lost, the device is not stalled
	}
}

func (d *Device) track(h uint32, o any) {
	d.mu.Lock()
	if o == nil {
		delete(d.objs, h)
	} else {
		d.objs[h] = o
	}
	d.mu.Unlock()
}

// Close detaches: the daemon destroys whatever the process left.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.ctl.close()
	if d.evc != nil {
		d.evc.Close()
		<-d.evDone
	}
	if d.db != nil {
		d.db.Close()
	}
	close(d.events)
	return nil
}

func (d *Device) Query() driver.DeviceAttr         { return d.attr }
func (d *Device) QueryPort(uint8) driver.PortAttr  { return d.port }
func (d *Device) GIDTable(uint8) []driver.GIDEntry { return append([]driver.GIDEntry(nil), d.gids...) }
func (d *Device) Events() <-chan driver.AsyncEvent { return d.events }
func (d *Device) Progress() bool                   { return false }
func (d *Device) ring()                            { d.db.Signal() }
func (d *Device) gone() bool                       { return d.dead.Load() }
func (d *Device) call(op attach.Op, b func(*attach.Writer)) (attach.Reader, error) {
	r, f, err := d.ctl.call(op, b)
	if err != nil {
		return r, err
	}
	return r, want(&r, f, 0)
}

// Counters are the device's, shared by every process attached to it.
func (d *Device) Counters() driver.Counters {
	r, err := d.call(attach.OpDeviceCounters, nil)
	if err != nil {
		return nil
	}
	return r.Counters()
}

// AllocPD allocates a PD in the daemon.
func (d *Device) AllocPD() (driver.PD, error) {
	r, err := d.call(attach.OpAllocPD, nil)
	if err != nil {
		return nil, err
	}
	return &PD{d: d, h: r.U32()}, nil
}

// Command sends a command of the attach protocol that a service above verbs speaks
// (driver.Commander; package cm's rdma_cm).
func (d *Device) Command(op uint16, req []byte) ([]byte, []*os.File, error) {
	r, files, err := d.ctl.call(attach.Op(op), func(w *attach.Writer) { w.Bytes(req) })
	if err != nil {
		return nil, nil, err
	}
	return r.B, files, nil
}
