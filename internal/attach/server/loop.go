//go:build linux

package server

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/shm"
)

// loop is the daemon's event loop: one goroutine that waits in one epoll_wait for
// every device's socket (engine.Device.DriveRx) and for the doorbell of every session
// whose pump sleeps, and does both jobs itself: a doorbell's session step (the pump's
// work: the client's posts go to the engine) and the devices' receive processing (the
// completions go into the clients' CQ rings, from the engine's CQ events).
//
// Without it one attached message woke a goroutine per hop: the pump on the doorbell,
// the peer device's receive goroutine on its socket, the sender's receive goroutine on
// the ACK, each a thread woken through Go's netpoller, often with another thread
// started and parked by the scheduler beside it. Here, after the iteration that posted,
// the loop looks at its set again without waiting: a post to a device of this daemon
// has been delivered by the send itself (loopback), so it is received, completed and
// ACKed, and the ACK completed, in the same wake-up. A packet from another host or
// process costs one wake-up. The loop holds no thread while it waits but the one
// blocked in epoll_wait, and no CPU.
type loop struct {
	ep   int
	stop *shm.Eventfd
	// kick makes the loop look at its devices again: the helper gives back a device on
	// same-host rings, whose producers signal nobody until the loop's next wait.
	kick *shm.Eventfd
	done chan struct{}

	mu       sync.Mutex
	devs     map[int32]*loopDev
	all      []*loopDev // devs, in the order they came
	rings    []*loopDev // the devices on same-host rings, which the loop polls every turn
	sessions map[int32]*session
	next     int32

	// The helper: a second goroutine to which the loop lends a device while a stream
	// between two of its devices keeps it busy (lend.go).
	lendOK bool
	hep    int           // the helper's epoll set: the lent device's socket
	lendCh chan *loopDev // to the helper; closed when the loop has left
	helped chan struct{} // closed when the helper has left
	quit   atomic.Bool
	lent   atomic.Bool // a device is the helper's now
	// holdOff: no lending before this time (UnixNano), set by the helper when
	// lending did not pay.
	holdOff atomic.Int64

	closeOnce sync.Once
}

// loopDev is a device the loop reads.
type loopDev struct {
	d   *engine.Device
	fd  int
	rfd int // the device's same-host rings' eventfd (engine.Device.RingFD), -1 without
	tok int32
	// away: the device is the helper's (lend.go); the loop does not poll its rings.
	away atomic.Bool
	rx0  uint64 // d.RxBytes at the start of the loop's current look at lending (lend.go)
	// solo: bytes per nanosecond the device received in the window before its lend,
	// with the loop alone.
	solo float64
	// lends: how many times the device went to the helper; slower: how many of them
	// ended because it received slower there (goverbs stat shows both).
	lends, slower atomic.Uint64
}

// Tokens in the epoll events' data: the stop eventfd, then devices (a device's rings'
// eventfd is its token with tokRings set), then sessions.
const (
	tokStop         = 0
	tokRings        = 1 << 15
	tokKick         = tokFirstSession - 1
	tokFirstSession = 1 << 16
)

func newLoop() (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	stop, err := shm.NewUnwatchedEventfd()
	if err != nil {
		unix.Close(ep)
		return nil, err
	}
	kick, err := shm.NewUnwatchedEventfd()
	if err != nil {
		unix.Close(ep)
		stop.Close()
		return nil, err
	}
	hep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		unix.Close(ep)
		stop.Close()
		kick.Close()
		return nil, err
	}
	l := &loop{ep: ep, stop: stop, kick: kick, done: make(chan struct{}), devs: map[int32]*loopDev{},
		sessions: map[int32]*session{}, next: tokFirstSession,
		lendOK: os.Getenv("GOVERBS_SERVE_LEND") != "0", hep: hep, lendCh: make(chan *loopDev, 1),
		helped: make(chan struct{})}
	go l.help()
	if err := l.ctl(unix.EPOLL_CTL_ADD, stop.FD(), tokStop); err != nil {
		close(l.done)
		l.close()
		return nil, err
	}
	if err := l.ctl(unix.EPOLL_CTL_ADD, kick.FD(), tokKick); err != nil {
		close(l.done)
		l.close()
		return nil, err
	}
	go l.run()
	return l, nil
}

func (l *loop) ctl(op, fd int, tok int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tok}
	return unix.EpollCtl(l.ep, op, fd, &ev)
}

// addDevice makes the loop the device's receive path, if the device allows it; a
// device that does not keeps its receive goroutine.
func (l *loop) addDevice(d *engine.Device) bool {
	fd, ok := d.DriveRx()
	if !ok {
		return false
	}
	// The loop does both ends' work of a stream between two of its devices on one
	// thread: the sender's copy into a ring is then work added, not done beside
	// (netio.LoanTaker).
	d.PreferCopies(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	tok := int32(1 + len(l.devs))
	ld := &loopDev{d: d, fd: fd, rfd: d.RingFD(), tok: tok}
	if err := l.ctl(unix.EPOLL_CTL_ADD, fd, tok); err != nil {
		// Nothing would wait for the socket: read it as the receive goroutine did, by
		// polls only. (epoll_ctl fails only for want of memory.)
		return false
	}
	if ld.rfd >= 0 {
		if err := l.ctl(unix.EPOLL_CTL_ADD, ld.rfd, tok|tokRings); err != nil {
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, fd, nil)
			return false
		}
		l.rings = append(l.rings, ld)
	}
	l.devs[tok] = ld
	l.all = append(l.all, ld)
	return true
}

// sleepRings tells the producers of every ring device in rings that the loop is about
// to wait (engine.Device.RingsSleep); false, with the word taken back from all, when a
// ring holds something: the loop looks again instead.
func sleepRings(rings []*loopDev) bool {
	for i, ld := range rings {
		if !ld.d.RingsSleep() {
			for _, o := range rings[:i] {
				o.d.RingsAwake(false)
			}
			return false
		}
	}
	return true
}

// addDev appends ld to devs unless it is there.
func addDev(devs []*loopDev, ld *loopDev) []*loopDev {
	for _, o := range devs {
		if o == ld {
			return devs
		}
	}
	return append(devs, ld)
}

// addSession watches the session's doorbell; it returns the token to remove it by.
func (l *loop) addSession(s *session) (int32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tok := l.next
	l.next++
	if l.next < tokFirstSession {
		l.next = tokFirstSession
	}
	if err := l.ctl(unix.EPOLL_CTL_ADD, s.db.FD(), tok); err != nil {
		return 0, err
	}
	l.sessions[tok] = s
	return tok, nil
}

// removeSession stops watching the doorbell, before it closes.
func (l *loop) removeSession(tok int32, fd int) {
	l.mu.Lock()
	delete(l.sessions, tok)
	l.mu.Unlock()
	unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, fd, nil)
}

func (l *loop) close() {
	l.closeOnce.Do(func() {
		select {
		case <-l.done:
		default:
			l.stop.Signal()
			<-l.done
		}
		l.quit.Store(true)
		close(l.lendCh)
		<-l.helped
		unix.Close(l.ep)
		unix.Close(l.hep)
		l.stop.Close()
		l.kick.Close()
	})
}

func (l *loop) run() {
	defer close(l.done)
	evs := make([]unix.EpollEvent, 64)
	var devs, rings []*loopDev
	var ss, lazy []*session
	var st stretch
	timeout, idle := -1, 0
	for {
		// The rings' producers write their eventfds only when told that the loop
		// waits: told just before a wait, and the word taken back after it. Between
		// waits the loop polls the rings (below), which costs no system call.
		slept, unslept := false, false
		if timeout < 0 {
			rings = rings[:0]
			l.mu.Lock()
			for _, ld := range l.rings {
				if !ld.away.Load() {
					rings = append(rings, ld)
				}
			}
			l.mu.Unlock()
			if sleepRings(rings) {
				slept = true
			} else {
				timeout, unslept = 0, true // a ring holds something: read it now
			}
		}
		n, err := unix.EpollWait(l.ep, evs, timeout)
		if slept {
			for _, ld := range rings {
				ld.d.RingsAwake(false)
			}
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return // the set is gone
		}
		devs, ss, lazy = devs[:0], ss[:0], lazy[:0]
		l.mu.Lock()
		if n == 0 && len(l.rings) == 0 {
			l.mu.Unlock()
			timeout, idle = -1, 0
			st.iters = 0
			continue
		}
		for _, ev := range evs[:n] {
			switch tok := ev.Fd; {
			case tok == tokStop:
				l.mu.Unlock()
				return
			case tok == tokKick:
				l.kick.Drain() // the rings are polled below
			case tok < tokFirstSession:
				ld := l.devs[tok&^tokRings]
				switch {
				case ld == nil:
				case tok&tokRings != 0:
					ld.d.RingsAwake(true)
					devs = addDev(devs, ld)
				default:
					ld.d.SocketReadable()
					devs = addDev(devs, ld)
				}
			default:
				if s := l.sessions[tok]; s != nil {
					ss = append(ss, s)
				}
			}
		}
		// Rings write no eventfd while the loop is awake: it looks at them every turn.
		for _, ld := range l.rings {
			if !ld.away.Load() {
				devs = addDev(devs, ld)
			}
		}
		if len(devs) > 0 {
			for _, s := range l.sessions {
				if s.lazy.Load() {
					lazy = append(lazy, s)
				}
			}
		}
		l.mu.Unlock()
		did := false
		// Doorbells first: their posts' packets are in the peers' sockets and rings
		// when the devices are read, here or in the look that follows.
		for _, s := range ss {
			if s.rung() {
				did = true
			}
		}
		for _, ld := range devs {
			// The receives RC clients posted without a doorbell go to the engine before
			// the packets that may need them.
			for _, s := range lazy {
				if s.d.eng == ld.d {
					s.lazyTurn()
				}
			}
			if ld.d.PollDriven() {
				did = true
			}
		}
		timeout = 0 // look again at once: what this iteration sent is there now
		switch {
		case did:
			idle = 0
			if l.lendOK {
				l.watchStretch(&st)
			}
		case n == 0 && !unslept:
			// Nothing signalled and the rings were empty: wait.
			timeout, idle = -1, 0
			st.iters = 0
		default:
			st.iters = 0
			// A session, a socket or a ring another goroutine held: it stays readable
			// (the set is level-triggered; a ring is not empty); let that goroutine run
			// before looking again, and sleep a little if it keeps it (a command that
			// registers a large region holds its session for milliseconds), rather
			// than spin a core.
			if idle++; idle < 8 {
				runtime.Gosched()
			} else {
				time.Sleep(50 * time.Microsecond)
			}
		}
		for i := range ss {
			ss[i] = nil
		}
		for i := range lazy {
			lazy[i] = nil
		}
		for i := range devs {
			devs[i] = nil
		}
	}
}

// rung is the loop's turn at a session whose doorbell it saw written: while the pump
// sleeps, the loop does the pump's work (step) itself and sets the rings' sleeping
// flags again, so that the client's next post writes the doorbell again. It reports
// whether it did anything; a session another goroutine holds is left ringing, for
// the next look.
func (s *session) rung() bool {
	if !s.mu.TryLock() {
		return false
	}
	s.dbMu.RLock()
	if !s.dbClosed {
		s.db.Drain()
	}
	s.dbMu.RUnlock()
	if s.closing || !s.parked {
		// The pump is awake (it looks again before it sleeps), or leaving.
		s.mu.Unlock()
		return true
	}
	// The client's doorbell write took the flag of the ring it rang for (ctrl.wake):
	// say again that the pump sleeps, then look once more, as the pump does.
	for {
		for s.step() {
		}
		s.sleeping(true)
		if !s.step() {
			break
		}
	}
	stuck := false
	for _, c := range s.cqs {
		stuck = stuck || len(c.carry) > 0
	}
	wake := s.d.srv.cfg.Spin > 0
	if wake {
		s.parked = false // the pump spins again for the client's next posts
	}
	s.mu.Unlock()
	if stuck {
		// A CQ ring is full and the client does not say when it polls: look again
		// soon.
		time.AfterFunc(100*time.Microsecond, s.signal)
	}
	if wake {
		s.resumePump()
	}
	return true
}

// resumePump wakes a pump parked while the loop serves its session.
func (s *session) resumePump() {
	select {
	case s.resume <- struct{}{}:
	default:
	}
}

// lazyTurn posts the receives the client wrote into its RC QPs' receive rings, which
// do not ring the doorbell (lazyRecv), while the pump sleeps; the loop calls it before
// it reads the session's device. A session another goroutine holds is skipped: a
// command takes them itself (command), and an awake pump in its step.
func (s *session) lazyTurn() {
	if !s.mu.TryLock() {
		return
	}
	if s.parked && !s.closing {
		s.takeLazyRecvs()
	}
	s.mu.Unlock()
}

// takeLazyRecvs posts what the client wrote into the receive rings that do not ring
// the doorbell, and reports whether there was any; s.mu is held.
func (s *session) takeLazyRecvs() bool {
	did := false
	for _, q := range s.qps {
		if q.lazyRecv && q.rq.drain(s, q.qp.PostRecv, q) {
			did = true
		}
	}
	return did
}
