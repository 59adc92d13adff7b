// Package control is the socket through which `goverbs stat` and `goverbs asyncwatch`
// look at a device that another goverbs tool runs, both ends of it, and the counter
// lines that tools print at exit and the socket serves.
package control

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs"
)

// A software device lives inside the process that opened it, so `goverbs stat` and
// `goverbs asyncwatch`, which run as processes of their own, cannot open it as
// rdma-core's tools open a kernel device. Every tool therefore serves its device on a
// unix socket named after the device's address, in a directory only its user can
// enter: no port to choose or collide on, nothing reachable from the network, found
// by the same address the user gives --bind, and present exactly while the tool runs
// (an expvar/HTTP endpoint would need a port per process and a flag to ask for it).
//
// The protocol is one request line, then text:
//
//	stat\n    the device's and each QP's counters, as PrintStats and PrintQPStats write
//	          them, then the connection closes
//	events\n  one line per asynchronous event as it happens (asyncwatch's format),
//	          until the tool closes the device

// controlDir is where the sockets live.
func controlDir() string { return shm.Dir() }

// controlPath is the socket of the device on addr.
func controlPath(addr netip.Addr) string {
	return filepath.Join(controlDir(), addr.Unmap().String()+".sock")
}

// Server serves one device's socket.
type Server struct {
	dev  *verbs.Device
	addr netip.Addr // the device's (its GID's) address, which names the socket
	l    net.Listener
	path string
	tool string

	mu   sync.Mutex
	qps  map[*verbs.QP]bool
	subs map[chan string]bool
	done chan struct{}
}

// Serve starts the socket of dev, named by addr: the address of the device's GID (for
// a kernel device, -tags ibverbs, a tool's exchange listens on "any" address, but the
// device keeps its GID). A failure only costs stat and asyncwatch their view of this
// tool: it is reported once, the tool runs on, and the nil Server it gets does nothing.
func Serve(dev *verbs.Device, addr netip.Addr, tool string) *Server {
	path := controlPath(addr)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "goverbs %s: no stat/asyncwatch socket: %v\n", tool, err)
		return nil
	}
	// A socket file left by a process that died: nobody answers on it.
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
	} else {
		os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goverbs %s: no stat/asyncwatch socket: %v\n", tool, err)
		return nil
	}
	c := &Server{dev: dev, addr: addr, l: l, path: path, tool: tool, qps: map[*verbs.QP]bool{}, subs: map[chan string]bool{},
		done: make(chan struct{})}
	go c.forwardEvents()
	go c.accept()
	return c
}

// Close stops serving and removes the socket.
func (c *Server) Close() {
	if c == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	c.l.Close()
	os.Remove(c.path)
}

// Track adds (or with add false removes) QPs whose counters stat shows.
func (c *Server) Track(qps []*verbs.QP, add bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	for _, qp := range qps {
		if add {
			c.qps[qp] = true
		} else {
			delete(c.qps, qp)
		}
	}
	c.mu.Unlock()
}

// forwardEvents hands every async event of the device to the watchers of the moment.
func (c *Server) forwardEvents() {
	for ev := range c.dev.Events() {
		line := eventLine(ev)
		c.mu.Lock()
		for ch := range c.subs {
			select {
			case ch <- line:
			default: // a watcher that does not read loses events, never stalls the device
			}
		}
		c.mu.Unlock()
	}
}

func (c *Server) accept() {
	for {
		conn, err := c.l.Accept()
		if err != nil {
			return
		}
		go c.handle(conn)
	}
}

func (c *Server) handle(conn net.Conn) {
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	req, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return
	}
	conn.SetReadDeadline(time.Time{})
	req = strings.TrimSpace(req)
	// A watcher subscribes before it reads the header: asyncwatch tells its user it is
	// watching once it has the header, and no event may fall between the two.
	var ch chan string
	if req == "events" {
		ch = make(chan string, 256)
		c.mu.Lock()
		c.subs[ch] = true
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.subs, ch)
			c.mu.Unlock()
		}()
	}
	fmt.Fprintf(conn, "# goverbs %s (pid %d): device %s on %s\n", c.tool, os.Getpid(), c.dev.Name(), c.addr.Unmap())
	switch req {
	case "stat":
		PrintStats(conn, c.dev, false)
		c.mu.Lock()
		qps := make([]*verbs.QP, 0, len(c.qps))
		for qp := range c.qps {
			qps = append(qps, qp)
		}
		c.mu.Unlock()
		slices.SortFunc(qps, func(a, b *verbs.QP) int { return cmp.Compare(a.QPN(), b.QPN()) })
		for _, qp := range qps {
			PrintQPStats(conn, qp)
		}
	case "events":
		gone := make(chan struct{})
		go func() { io.Copy(io.Discard, conn); close(gone) }() // the watcher hung up
		for {
			select {
			case line := <-ch:
				if _, err := io.WriteString(conn, line); err != nil {
					return
				}
			case <-gone:
				return
			case <-c.done:
				return
			}
		}
	default:
		fmt.Fprintf(conn, "error: unknown request %q (stat, events)\n", req)
	}
}

// eventNames are libibverbs' names of the event types (enum ibv_event_type).
var eventNames = map[verbs.EventType]string{
	verbs.EventCQErr: "IBV_EVENT_CQ_ERR", verbs.EventQPFatal: "IBV_EVENT_QP_FATAL",
	verbs.EventQPReqErr: "IBV_EVENT_QP_REQ_ERR", verbs.EventQPAccessErr: "IBV_EVENT_QP_ACCESS_ERR",
	verbs.EventCommEst: "IBV_EVENT_COMM_EST", verbs.EventSQDrained: "IBV_EVENT_SQ_DRAINED",
	verbs.EventDeviceFatal: "IBV_EVENT_DEVICE_FATAL", verbs.EventPortActive: "IBV_EVENT_PORT_ACTIVE",
	verbs.EventPortErr: "IBV_EVENT_PORT_ERR", verbs.EventSRQErr: "IBV_EVENT_SRQ_ERR",
	verbs.EventSRQLimitReached: "IBV_EVENT_SRQ_LIMIT_REACHED", verbs.EventQPLastWQEReached: "IBV_EVENT_QP_LAST_WQE_REACHED",
}

// eventLine formats an event as rdma-core's asyncwatch does ("  event_type NAME (N),
// port P"), naming the QP, CQ or SRQ it concerns where asyncwatch has only a port.
func eventLine(ev verbs.AsyncEvent) string {
	name, ok := eventNames[ev.Type]
	if !ok {
		name = "unexpected"
	}
	s := fmt.Sprintf("  event_type %s (%d), port %d", name, ev.Type, ev.Port)
	switch {
	case ev.QP != nil:
		s += fmt.Sprintf(", QP 0x%06x", ev.QP.QPN())
	case ev.SRQ != nil:
		s += ", SRQ"
	case ev.CQ != nil:
		s += ", CQ"
	}
	return s + "\n"
}

// Dial connects to the tool serving the device on addr and sends req.
func Dial(addr netip.Addr, req string) (net.Conn, error) {
	c, err := net.DialTimeout("unix", controlPath(addr), 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("no goverbs tool runs a device on %s (%s: %v)", addr.Unmap(), controlPath(addr), err)
	}
	if _, err := io.WriteString(c, req+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// RunningDevices lists the addresses of the devices tools serve now.
func RunningDevices() []netip.Addr {
	names, _ := filepath.Glob(filepath.Join(controlDir(), "*.sock"))
	var out []netip.Addr
	for _, n := range names {
		a, err := netip.ParseAddr(strings.TrimSuffix(filepath.Base(n), ".sock"))
		if err != nil {
			continue
		}
		if c, err := net.DialTimeout("unix", n, time.Second); err == nil {
			c.Close()
			out = append(out, a)
		} else {
			os.Remove(n) // left by a tool that was killed
		}
	}
	return out
}
