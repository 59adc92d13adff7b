//go:build linux

package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

// Server is a running daemon.
type Server struct {
	cfg  Config
	log  *slog.Logger
	devs []*device
	loop *loop // nil: every session's pump sleeps on its doorbell (loop.go)
}

// New opens every device of cfg and starts listening for clients.
func New(cfg Config) (*Server, error) {
	if len(cfg.Devices) == 0 {
		return nil, errors.New("serve: no devices")
	}
	if cfg.Dir == "" {
		cfg.Dir = shm.Dir()
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := shm.EnsureDir(cfg.Dir); err != nil {
		return nil, err
	}
	if os.Getenv("GOVERBS_SERVE_LOOP") != "0" {
		l, err := newLoop()
		if err != nil {
			return nil, fmt.Errorf("serve: event loop: %w", err)
		}
		s.loop = l
	}
	for _, dc := range cfg.Devices {
		d, err := s.open(dc)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.devs = append(s.devs, d)
	}
	return s, nil
}

// Close detaches every client (each sees its device's fatal event) and closes the
// devices.
func (s *Server) Close() error {
	for _, d := range s.devs {
		d.close()
	}
	if s.loop != nil {
		s.loop.close()
	}
	return nil
}

// Clients is how many processes are attached to the daemon's devices now.
func (s *Server) Clients() int {
	n := 0
	for _, d := range s.devs {
		d.mu.Lock()
		n += len(d.sessions)
		d.mu.Unlock()
	}
	return n
}

// Sockets lists the rendezvous sockets, one per device.
func (s *Server) Sockets() []string {
	var out []string
	for _, d := range s.devs {
		out = append(out, d.path)
	}
	return out
}

// device is one shared device.
type device struct {
	srv *Server
	cfg soft.Config
	dev driver.Device
	cm  *cm.Service // the device's rdma_cm, shared by the sessions
	eng *engine.Device
	// driven: the daemon's event loop reads the device's socket (loop.go), so it can
	// take an RC QP's receives before each packet instead of at a doorbell (lazyRecv).
	driven bool
	addr   netip.Addr
	path   string
	l      *shm.Listener
	steer  *steer // the SO_REUSEPORT group of clients' own engines; nil: none (steer.go)
	stat   net.Listener
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[*session]struct{}
	owners   map[any]owner // engine QP, CQ, SRQ → the client's handle, for async events
	closed   bool
}

type owner struct {
	s    *session
	h    uint32
	kind uint32
}

func (s *Server) open(cfg soft.Config) (*device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("serve: software device %s has no address", cfg.Name)
	}
	// The rendezvous socket first: a second daemon for the address stops here, before
	// its device's socket could join this one's SO_REUSEPORT group (steer.go).
	path := attach.SocketPath(s.cfg.Dir, cfg.Addr.Unmap())
	l, err := shm.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", cfg.Name, err)
	}
	// On the UDP backend the device's socket is the first of a SO_REUSEPORT group that
	// Go clients running engines of their own join (steer.go); other backends have no
	// group. With the same-host rings, the rings carry only datagrams for the daemon's
	// engine's QPNs (top byte 0), to this device and from peers, who learn it at the
	// rendezvous (netio.SameHostOptions.Steered): the rest cross the kernel's steering.
	cfg.ReusePort = cfg.Backend == "" && os.Getenv("GOVERBS_SERVE_ENGINES") != "0"
	if s.loop != nil && !cfg.BusyPoll && cfg.Backend == "" && !sameHostOff() {
		// The same-host rings by default (GOVERBS_SHM=0 turns them off): the loop reads
		// them as it reads the socket, so traffic between clients on the daemon's engine
		// (C clients; Go clients with GOVERBS_ATTACH_ENGINE=0) of the daemon's devices
		// skips the kernel: the C flavour's perftest 64 KiB WRITE 1.3-1.5x and 8 B
		// latency 0.5-0.6x its figures over UDP (capi/compare.sh FLAVOUR=attach, DESIGN).
		cfg.SameHost = true
	} else if !cfg.SameHost {
		// Without the loop (a busy-poll daemon, another backend) nothing reads the rings
		// as it reads the socket, and with GOVERBS_SHM=0 the daemon was asked for UDP:
		// the device stays on it, where soft.Open's default for a program's own device
		// would give it the rings.
		cfg.NoSameHost = true
	}
	dev, err := soft.Open(cfg)
	if err != nil {
		l.Close()
		return nil, err
	}
	eng, ok := dev.(*engine.Device)
	if !ok {
		l.Close()
		dev.Close()
		return nil, fmt.Errorf("serve: %s is not a software device", cfg.Name)
	}
	var st *steer
	if fd, ok := eng.RecvFD(); ok && cfg.ReusePort {
		if st, err = newSteer(fd, eng.LocalAddr()); err == nil {
			err = eng.SetQPNs(steerOwnFirst, steerOwnLast)
		}
		if err != nil {
			s.log.Warn("clients' own engines unavailable", "device", cfg.Name, "err", err)
			st = nil
		}
	}
	// The device's completions go to other processes, which spin on their CQ rings;
	// its receive goroutine must leave them the cores (engine.NoReceiveSpin).
	eng.NoReceiveSpin()
	driven := s.loop != nil && s.loop.addDevice(eng)
	addr := eng.LocalAddr().Addr().Unmap()
	d := &device{srv: s, cfg: cfg, dev: dev, eng: eng, driven: driven, addr: addr, path: path, l: l, steer: st,
		sessions: map[*session]struct{}{}, owners: map[any]owner{}}
	d.cm = cm.NewService(eng, addr, dev.Query().NodeGUID, dev.QueryPort(1).ActiveMTU, nil)
	d.stat = d.listenStat()
	d.wg.Add(2)
	go d.accept()
	go d.events()
	s.log.Info("serving", "device", d.cfg.Name, "addr", addr, "socket", d.path, "client_engines", st != nil)
	return d, nil
}

func (d *device) accept() {
	defer d.wg.Done()
	for {
		c, err := d.l.Accept()
		if err != nil {
			return
		}
		s, err := newSession(d, c)
		if err != nil {
			d.srv.log.Warn("attach refused", "device", d.cfg.Name, "err", err)
			c.Close()
			continue
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			s.teardown()
			continue
		}
		d.sessions[s] = struct{}{}
		d.mu.Unlock()
		go s.serve()
	}
}

// events routes the engine's async events to the client that owns their object;
// port events go to every client.
func (d *device) events() {
	defer d.wg.Done()
	for ev := range d.dev.Events() {
		var key any
		switch {
		case ev.QP != nil:
			key = ev.QP
		case ev.CQ != nil:
			key = ev.CQ
		case ev.SRQ != nil:
			key = ev.SRQ
		}
		d.mu.Lock()
		if key == nil {
			for s := range d.sessions {
				s.event(uint32(ev.Type), attach.EventPort, uint32(ev.Port))
			}
		} else if o, ok := d.owners[key]; ok {
			o.s.event(uint32(ev.Type), o.kind, o.h)
			// The receives an RC QP left in its ring (lazyRecv) go to the engine now, which
			// flushes them if the QP has failed.
			o.s.signal()
		}
		d.mu.Unlock()
	}
}

func (d *device) own(key any, o owner) {
	d.mu.Lock()
	d.owners[key] = o
	d.mu.Unlock()
}

func (d *device) disown(key any) {
	d.mu.Lock()
	delete(d.owners, key)
	d.mu.Unlock()
}

func (d *device) drop(s *session) {
	d.mu.Lock()
	delete(d.sessions, s)
	d.mu.Unlock()
}

func (d *device) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	ss := make([]*session, 0, len(d.sessions))
	for s := range d.sessions {
		ss = append(ss, s)
	}
	d.mu.Unlock()
	d.l.Close()
	if d.stat != nil {
		d.stat.Close()
	}
	for _, s := range ss {
		s.c.Close() // its serve loop tears it down
		<-s.done
	}
	d.cm.Close()
	if d.steer != nil {
		d.steer.close()
	}
	d.dev.Close()
	d.wg.Wait()
	os.Remove(d.path)
}

// sameHostOff reports whether GOVERBS_SHM turns the same-host shortcut off (0, off,
// false, no): the daemon's devices then pass every datagram through the kernel's UDP.
func sameHostOff() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(soft.EnvSameHost))) {
	case "0", "off", "false", "no":
		return true
	}
	return false
}
