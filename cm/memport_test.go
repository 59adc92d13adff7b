package cm

import (
	"net/netip"
	"sync"
)

// memHub carries MADs between agents in memory, as QP1 would over the
// network: each port delivers from its own goroutine, in order. drop, when
// set, decides a MAD's loss.
type memHub struct {
	mu    sync.Mutex
	ports map[netip.Addr]*memPort
	drop  func(from, to netip.Addr, m []byte) bool
}

type memPort struct {
	hub  *memHub
	addr netip.Addr
	q    chan memMAD
	mu   sync.Mutex
	h    func(netip.Addr, []byte)
	done chan struct{}
	once sync.Once
}

type memMAD struct {
	from netip.Addr
	b    []byte
}

func newHub() *memHub { return &memHub{ports: map[netip.Addr]*memPort{}} }

func (h *memHub) port(addr netip.Addr) *memPort {
	p := &memPort{hub: h, addr: addr, q: make(chan memMAD, 1024), done: make(chan struct{})}
	h.mu.Lock()
	h.ports[addr] = p
	h.mu.Unlock()
	go p.run()
	return p
}

func (p *memPort) run() {
	for {
		select {
		case m := <-p.q:
			p.mu.Lock()
			h := p.h
			p.mu.Unlock()
			if h != nil {
				h(m.from, m.b)
			}
		case <-p.done:
			return
		}
	}
}

func (p *memPort) SendMAD(to netip.Addr, m []byte) error {
	p.hub.mu.Lock()
	dst := p.hub.ports[to]
	drop := p.hub.drop
	p.hub.mu.Unlock()
	if dst == nil || (drop != nil && drop(p.addr, to, m)) {
		return nil // lost, as a datagram to nobody is
	}
	select {
	case dst.q <- memMAD{p.addr, append([]byte(nil), m...)}:
	case <-dst.done:
	}
	return nil
}

func (p *memPort) SetMADHandler(h func(netip.Addr, []byte)) {
	p.mu.Lock()
	p.h = h
	p.mu.Unlock()
}

func (p *memPort) Close() error {
	p.once.Do(func() {
		p.hub.mu.Lock()
		if p.hub.ports[p.addr] == p {
			delete(p.hub.ports, p.addr)
		}
		p.hub.mu.Unlock()
		close(p.done)
	})
	return nil
}
