//go:build linux

// The same-host shortcut's pairs: finding a peer device (rendezvous), setting up its
// ring pair, and tearing it down when either side goes.

package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/shm"
)

// wantsRing reports whether a destination may be a same-host device: a unicast
// address other than this Conn's own.
func (c *sameHostConn) wantsRing(a netip.AddrPort) bool {
	ip := a.Addr()
	return ip.IsValid() && !ip.IsMulticast() && a != c.inner.LocalAddr() && !c.closed.Load()
}

// learn adds a destination WriteBatch has not seen and starts a rendezvous with it.
// Once per destination: the map is copied on write so that lookups take no lock.
func (c *sameHostConn) learn(a netip.AddrPort) {
	c.maybeDial(c.entry(a))
}

// entry returns a's entry, adding it if it is new.
func (c *sameHostConn) entry(a netip.AddrPort) *shPeer {
	c.mu.Lock()
	old := *c.peers.Load()
	e := old[a]
	if e == nil {
		m := make(map[netip.AddrPort]*shPeer, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		e = &shPeer{addr: a}
		m[a] = e
		c.peers.Store(&m)
	}
	c.mu.Unlock()
	return e
}

// Resolve makes the rendezvous with dest now, if dest may be a same-host device and
// none is made or failed recently (Resolver), so that a QP's first packets already take
// the rings. It waits at most resolveWait: a peer that accepted and does not answer (a
// stopped process, one too loaded to run its accept loop) must not hold the verb that
// resolves (a QP's move to RTR, an AH's creation) for the handshake's whole timeout. The
// rendezvous goes on in the background meanwhile, and datagrams go by UDP until it is
// made.
func (c *sameHostConn) Resolve(dest netip.AddrPort) {
	if !c.wantsRing(dest) {
		return
	}
	e := c.entry(dest)
	if e.pair.Load() != nil || e.holding.Load() {
		return
	}
	if e.dialing.CompareAndSwap(false, true) {
		go c.dialTaken(e)
	}
	// Whoever dials, wait for its outcome, for a while: a live peer answers in microseconds.
	deadline := time.Now().Add(resolveWait)
	for e.pair.Load() == nil && e.dialing.Load() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
}

// maybeDial hands e to the dialer unless a rendezvous is under way or failed recently.
func (c *sameHostConn) maybeDial(e *shPeer) {
	if e.holding.Load() || e.dialing.Load() || !e.dialing.CompareAndSwap(false, true) {
		return
	}
	select {
	case c.dialCh <- e:
	default:
		e.dialing.Store(false)
	}
}

// holdOff keeps e from the dialer for dialRetry: a rendezvous with it failed, or its
// pair ended. A timer takes the hold back, so that WriteBatch tests one flag per run of
// messages where it read the clock to compare with a retry time: that clock read was a
// measurable share of a busy-poll one-way to a remote peer (perf of 8 B send_lat
// --busy-poll over a veth pair: __vdso_clock_gettime 1.06% of the sender's samples with
// the wrapper against 0.39% without, half of it under WriteBatch). Two holds that
// overlap end at the first one's end: the retry comes early, nothing worse.
func holdOff(e *shPeer) {
	e.holding.Store(true)
	time.AfterFunc(dialRetry, func() { e.holding.Store(false) })
}

// ---- rendezvous ----

// hello is the initiator's message, reply the acceptor's: magic, a field (the ring size
// in a hello, the status in a reply), the sender's LocalAddr and SourceAddr (16-byte
// address and port each). A hello carries the region's memfd and the initiator's
// eventfd, an accepting reply the acceptor's eventfd.
func putAddr(b []byte, a netip.AddrPort) {
	ip := a.Addr().As16()
	copy(b, ip[:])
	binary.BigEndian.PutUint16(b[16:], a.Port())
}

func getAddr(b []byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])).Unmap(), binary.BigEndian.Uint16(b[16:]))
}

// A Steered Conn sends version 02 (helloMagic2, replyMagic2) with helloFlagSteered in
// the flags word at offset 12; any other sends version 01. Both carry helloFlagUnsealed
// there: the word is zero in a version 01 message of a build before it, which reads
// none of it.
func (c *sameHostConn) message(magic string, field uint32) []byte {
	b := make([]byte, helloLen)
	copy(b, magic)
	binary.BigEndian.PutUint32(b[8:], field)
	flags := uint32(helloFlagUnsealed)
	if c.steered {
		b[7] = '2' // GVSHMH02, GVSHMA02
		flags |= helloFlagSteered
	}
	binary.BigEndian.PutUint32(b[12:], flags)
	putAddr(b[16:], c.inner.LocalAddr())
	putAddr(b[34:], c.inner.SourceAddr())
	return b
}

const (
	replyOK      = 0
	replyRefused = 1
)

const (
	// helloFlagSteered: the sender's socket is Steered: send it by ring only datagrams
	// whose BTH destination QPN has top byte 0, and the others to its UDP address.
	// Version 02 only: a build that does not know it must refuse the pair.
	helloFlagSteered = 1
	// helloFlagUnsealed: the sender reads its ring without checking ICRCs
	// (Message.SameHost): datagrams into it may go unsealed. Either version: a build
	// that does not know it seals every datagram, as before.
	helloFlagUnsealed = 2
)

// peerFlags reads a hello's or reply's version (want01 or want02, its magic of either
// version) and its sender's flags (helloFlagSteered only in version 02); ok false for
// neither version.
func peerFlags(b []byte, want01, want02 string) (flags uint32, ok bool) {
	word := binary.BigEndian.Uint32(b[12:])
	switch string(b[:8]) {
	case want01:
		return word & helloFlagUnsealed, true
	case want02:
		return word, true
	}
	return 0, false
}

func (c *sameHostConn) dialLoop() {
	for {
		select {
		case <-c.done:
			return
		case e := <-c.dialCh:
			c.dialTaken(e)
		}
	}
}

// dialTaken makes the rendezvous with e, whose dialing flag the caller set, unless a
// pair was made meanwhile; a failure holds e off (holdOff). It clears the flag.
func (c *sameHostConn) dialTaken(e *shPeer) {
	if e.pair.Load() == nil {
		if err := c.dial(e); err != nil {
			holdOff(e)
		}
	}
	e.dialing.Store(false)
}

// dial makes a ring pair with the device at e.addr, if one of this user's serves it.
func (c *sameHostConn) dial(e *shPeer) error {
	uc, err := shm.Dial(c.sockPath(e.addr), handshakeTimeout)
	if err != nil {
		return err
	}
	region, err := shm.Create("goverbs-samehost", regionSize(c.ring))
	if err != nil {
		uc.Close()
		return err
	}
	fail := func(err error) error {
		uc.Close()
		region.Close()
		return err
	}
	mem := region.Bytes()
	copy(mem, regionMagic)
	binary.LittleEndian.PutUint32(mem[8:], uint32(c.ring))
	for i := range 2 {
		if err := shm.InitRecordRing(ringMem(mem, c.ring, i), c.ring); err != nil {
			return fail(err)
		}
	}
	token, ip := newLocalToken(mem) // an acceptor in this process finds the loan queues by it
	fail0 := fail
	fail = func(err error) error {
		localRegions.Delete(token)
		return fail0(err)
	}
	uc.SetDeadline(time.Now().Add(handshakeTimeout))
	memfd := int(region.File().Fd()) // a memfd needs no netpoller: Fd's switch to blocking is harmless
	if err := shm.Send(uc, c.message(helloMagic, uint32(c.ring)), memfd, c.rxEv.FD()); err != nil {
		return fail(err)
	}
	buf := make([]byte, helloLen+8)
	n, fds, err := shm.Recv(uc, buf)
	if err != nil {
		return fail(err)
	}
	flags, known := peerFlags(buf, replyMagic, replyMagic2)
	if n != helloLen || !known || binary.BigEndian.Uint32(buf[8:]) != replyOK || len(fds) != 1 {
		shm.CloseFDs(fds)
		c.fallbacks.Add(1)
		return fail(errors.New("netio: same-host peer refused"))
	}
	peerEv, err := shm.EventfdFrom(fds[0])
	if err != nil {
		return fail(err)
	}
	uc.SetDeadline(time.Time{})
	p := &shPair{peerLocal: getAddr(buf[16:]), peerSrc: getAddr(buf[34:]), initiator: c.inner.LocalAddr(),
		region: region, uc: uc, peerEv: peerEv, lowOnly: flags&helloFlagSteered != 0, unsealed: flags&helloFlagUnsealed != 0}
	if p.peerLocal != e.addr {
		peerEv.Close()
		c.fallbacks.Add(1)
		return fail(errors.New("netio: same-host peer answers for another address"))
	}
	if f := testHookDialed.Load(); f != nil {
		(*f)()
	}
	p.live.Store(true)
	p.goneWords(mem, 1)
	p.token = token
	if ip.accepted.Load() && samePeerProcess(uc) {
		p.txq, p.rxq = &ip.q[0], &ip.q[1]
	}
	if p.tx, err = shm.NewRecordProducer(ringMem(mem, c.ring, 0), c.ring); err == nil {
		p.rx, err = shm.NewRecordConsumer(ringMem(mem, c.ring, 1), c.ring)
	}
	if err != nil {
		peerEv.Close()
		return fail(err)
	}
	c.install(p)
	return nil
}

// installSelf gives the device a ring to itself: datagrams one of its QPs sends to
// another of its own QPs (two processes attached to one goverbs serve device, or a
// program's loopback pair on one device) cross it instead of the kernel, as Linux rxe
// hands a packet for a local device straight to its receive path instead of the
// network. It is a pair like a peer's with one ring that this Conn both writes and
// reads, and no lifeline: it lasts as long as the Conn.
func (c *sameHostConn) installSelf() error {
	region, err := shm.Create("goverbs-samehost-self", regionSize(c.ring))
	if err != nil {
		return err
	}
	ring := ringMem(region.Bytes(), c.ring, 0)
	p := &shPair{peerLocal: c.inner.LocalAddr(), peerSrc: c.inner.SourceAddr(),
		initiator: c.inner.LocalAddr(), region: region, lowOnly: c.steered, unsealed: true}
	q := new(loanQueue)
	p.txq, p.rxq = q, q
	if err = shm.InitRecordRing(ring, c.ring); err == nil {
		if p.tx, err = shm.NewRecordProducer(ring, c.ring); err == nil {
			p.rx, err = shm.NewRecordConsumer(ring, c.ring)
		}
	}
	if err == nil {
		// The ring's wake-up is this Conn's own: a descriptor of its own for the pair,
		// which finalize closes like a peer's.
		var fd int
		if fd, err = unix.Dup(c.rxEv.FD()); err == nil {
			p.peerEv, err = shm.EventfdFrom(fd)
		}
	}
	if err != nil {
		region.Close()
		return fmt.Errorf("netio: same-host ring to itself: %w", err)
	}
	c.self = p
	c.install(p)
	return nil
}

func (c *sameHostConn) acceptLoop() {
	for {
		uc, err := c.l.Accept()
		if err != nil {
			return
		}
		go c.accept(uc)
	}
}

// accept answers one initiator: it maps the region it sent (checked: sealed, of the
// size its header and hello say) and replies with this Conn's eventfd, or refuses.
func (c *sameHostConn) accept(uc *net.UnixConn) {
	uc.SetDeadline(time.Now().Add(handshakeTimeout))
	buf := make([]byte, helloLen+8)
	n, fds, err := shm.Recv(uc, buf)
	refuse := func() {
		shm.CloseFDs(fds)
		shm.Send(uc, c.message(replyMagic, replyRefused))
		uc.Close()
	}
	if err != nil {
		uc.Close()
		return
	}
	ring := int(binary.BigEndian.Uint32(buf[8:]))
	flags, known := peerFlags(buf, helloMagic, helloMagic2)
	if n != helloLen || !known || len(fds) != 2 || ring < minRing || ring > maxRing || ring&(ring-1) != 0 || c.closed.Load() {
		refuse()
		return
	}
	peerLocal, peerSrc := getAddr(buf[16:]), getAddr(buf[34:])
	if peerLocal.Addr().Is4() != c.inner.LocalAddr().Addr().Is4() || !peerLocal.IsValid() {
		refuse()
		return
	}
	region, err := shm.Map(os.NewFile(uintptr(fds[0]), "goverbs-samehost"), regionSize(ring), regionSize(ring))
	fds = fds[1:]
	if err != nil {
		refuse()
		return
	}
	mem := region.Bytes()
	if string(mem[:8]) != regionMagic || int(binary.LittleEndian.Uint32(mem[8:])) != ring {
		region.Close()
		refuse()
		return
	}
	peerEv, err := shm.EventfdFrom(fds[0])
	fds = nil
	if err != nil {
		region.Close()
		refuse()
		return
	}
	p := &shPair{peerLocal: peerLocal, peerSrc: peerSrc, initiator: peerLocal, region: region, uc: uc, peerEv: peerEv,
		lowOnly: flags&helloFlagSteered != 0, unsealed: flags&helloFlagUnsealed != 0}
	p.goneWords(mem, 0)
	if samePeerProcess(uc) {
		if v, ok := localRegions.Load(binary.LittleEndian.Uint64(mem[tokenOff:])); ok {
			ip := v.(*inproc)
			p.rxq, p.txq = &ip.q[0], &ip.q[1]
			ip.accepted.Store(true) // before the reply: the dialer lends only after it
		}
	}
	if p.rx, err = shm.NewRecordConsumer(ringMem(mem, ring, 0), ring); err == nil {
		p.tx, err = shm.NewRecordProducer(ringMem(mem, ring, 1), ring)
	}
	if err != nil {
		peerEv.Close()
		region.Close()
		refuse()
		return
	}
	// The pair is in place before the dialer hears yes, so that once its rendezvous
	// returns, the traffic it starts finds the ring both ways. Installed after the
	// reply, it left a window in which this side had no pair: a QP brought up here
	// just after the peer's (softtest's NewPair, any CM handshake) dialled back,
	// and the two pairs' tie-break, tearing one down, could leave the peer on UDP for
	// its first packets and on a ring for the rest (a sequence NAK, every packet sent
	// twice: TestAckReqPlacement under -race, 2 runs in 800).
	uc.SetReadDeadline(time.Time{}) // watch reads the lifeline from now on
	if !c.install(p) {
		return // lost to a pair made meanwhile, or the Conn closed: torn down
	}
	if err := shm.Send(uc, c.message(replyMagic, replyOK), c.rxEv.FD()); err != nil {
		c.teardown(p, false)
		return
	}
	uc.SetWriteDeadline(time.Time{})
	p.live.Store(true)
	if f := testHookReplied.Load(); f != nil {
		(*f)()
	}
}

// testHookReplied, when set by a test, runs after accept has said yes; testHookDialed
// after dial heard yes, before it installs the pair.
var testHookReplied, testHookDialed atomic.Pointer[func()]

// install makes p the ring pair of its peer, unless the peer already has one: when both
// devices dialled at once, both keep the pair the lower LocalAddr created and close the
// other, so that they agree without another message. It reports whether p is the pair
// now (false: it lost, or the Conn closed, and it is torn down).
func (c *sameHostConn) install(p *shPair) bool {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		c.teardown(p, false)
		return false
	}
	old := *c.peers.Load()
	e := old[p.peerLocal]
	if e == nil {
		m := make(map[netip.AddrPort]*shPeer, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		e = &shPeer{addr: p.peerLocal}
		m[p.peerLocal] = e
		c.peers.Store(&m)
	}
	var loser *shPair
	if cur := e.pair.Load(); cur != nil && !cur.closing.Load() {
		// Equal initiators: the peer's address dialled again, a new device there (the
		// old one closed, its lifeline's end not yet read here) or the same one after
		// its side dropped the pair. The newer pair is the one that side reads: it wins.
		if p.initiator.Compare(cur.initiator) <= 0 {
			loser = cur
		} else {
			loser = p
		}
	}
	if loser != p {
		e.pair.Store(p)
		c.offloadGen.Add(1) // OffloadsICRC may say yes to p.peerLocal now
	}
	if p.rxq != nil && c.loans {
		p.rxq.loans.Store(true) // the reader asked for loans (PreferCopies)
	}
	// Read even a pair that lost: the peer may have written into it before it learnt.
	rx := append(append([]*shPair(nil), *c.rx.Load()...), p)
	c.rx.Store(&rx)
	// The peer may have written into p's ring before p was on the list, and its first
	// write took the ring's initial sleeping flag with it: a reader asleep since before
	// must wake, take the new list, and look. (Under c.mu: Close closes rxEv under it.)
	c.rxEv.Signal()
	if !c.busy {
		// a reader blocked in the socket's own wait, with no ring to watch until now
		c.ringWake.Store(true)
		c.inner.Interrupt()
	}
	c.mu.Unlock()
	if loser != nil {
		c.replace(loser)
	}
	if loser != p && p.uc != nil {
		go c.watch(p)
	}
	return loser != p
}

// lifelineReplaced is the one message a lifeline carries after the handshake: the side
// that sends it dropped the pair for another between the same two devices. A build
// before it reads and ignores it, and drops the pair at the lifeline's end as before.
const lifelineReplaced = 'R'

// replacedWait is how long a side told lifelineReplaced keeps writing into the old pair
// while its own rendezvous, the one that made the winner, completes (a handshake:
// microseconds, unless a thread is descheduled). It must stay well under drainTime,
// for which the far end still reads the old pair.
const replacedWait = drainTime / 4

// replace drops loser, a pair that lost to another between the same two devices. When
// the far end has it (live), it is told first, so that it keeps writing into loser
// until it installs the winner itself (it dialled too, or answered the winner's dial
// and hears this before its reply): at the lifeline's bare end it would send by UDP
// meanwhile, and those datagrams overtake or trail the rings'. Unlike a device's end,
// the far end's writer is not sent away by the gone word.
func (c *sameHostConn) replace(loser *shPair) {
	if !loser.live.Load() || loser.uc == nil {
		c.teardown(loser, true)
		return
	}
	loser.uc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	if _, err := loser.uc.Write([]byte{lifelineReplaced}); err == nil {
		loser.replaced.Store(true) // the far end knows: teardown leaves the gone word
	}
	c.teardown(loser, true)
}

// watch waits for the pair's lifeline to end (the peer closed its device or died, or
// replaced the pair), then drops the pair: a replaced one when the winner is installed
// here (install drops it then) or after replacedWait, whichever comes first.
func (c *sameHostConn) watch(p *shPair) {
	var b [64]byte
	for {
		n, err := p.uc.Read(b[:])
		for _, x := range b[:n] {
			if x == lifelineReplaced {
				p.replaced.Store(true)
			}
		}
		if err != nil {
			break
		}
	}
	if p.replaced.Load() && !p.closing.Load() {
		// teardown is idempotent: whichever of install and the timer comes second
		// finds the pair closing already. Close tears down every pair itself.
		time.AfterFunc(replacedWait, func() { c.teardown(p, true) })
		return
	}
	c.teardown(p, true)
}

// drainTime is how long a closing pair's ring stays mapped for its last datagrams to be
// read: a peer that closed its device may have left some (an ACK it owed, sent as it
// closed), which a socket would have kept in its buffer, and a peer whose pair lost to
// another may write a few more before it learns.
const drainTime = time.Second

// teardown stops sending through p: its destination goes by UDP again (after
// dialRetry). With drain, what p's ring holds is still read, and its memory unmapped
// after drainTime; without, at once.
func (c *sameHostConn) teardown(p *shPair, drain bool) {
	if p.closing.Swap(true) {
		if !drain {
			c.finalize(p)
		}
		return
	}
	if p.gone != nil && !p.replaced.Load() {
		// Mapped until finalize, below: the far end's writer goes by UDP from now on
		// (unless it was told the pair was replaced: it writes here until it installs
		// the winner, and what it writes is read while the pair drains).
		atomic.StoreUint32(p.gone, 1)
	}
	if p.uc != nil {
		p.uc.Close()
	}
	c.mu.Lock()
	if e := (*c.peers.Load())[p.peerLocal]; e != nil && e.pair.CompareAndSwap(p, nil) {
		holdOff(e)
		c.offloadGen.Add(1) // a sender that kept OffloadsICRC's yes asks again
	}
	c.mu.Unlock()
	if drain && !c.closed.Load() {
		time.AfterFunc(drainTime, func() { c.finalize(p) })
		return
	}
	c.finalize(p)
}

// finalize takes p out of the read list and unmaps its memory once no reader or writer
// is inside it. The reader reads the rings under rmu alone (readRing), with a list it
// loaded under rmu: p is unmapped here when rmu is free and nothing is lent, and
// otherwise by the reader, at its next read (reapLocked), which rxEv wakes it for.
func (c *sameHostConn) finalize(p *shPair) {
	if p.dead.Load() {
		return
	}
	if p.token != 0 {
		localRegions.Delete(p.token)
	}
	c.mu.Lock()
	// graved first: a reader that loads the new list sees it (ReadBatch).
	c.graves = append(c.graves, p)
	c.graved.Store(true)
	old := *c.rx.Load()
	rx := make([]*shPair, 0, len(old))
	for _, q := range old {
		if q != p {
			rx = append(rx, q)
		}
	}
	c.rx.Store(&rx)
	if !c.closed.Load() {
		c.rxEv.Signal() // a reader waiting with rmu held looks again, and reaps
	}
	c.mu.Unlock()
	if c.rmu.TryLock() {
		c.reapLocked()
		c.rmu.Unlock()
	}
}

// reapLocked unmaps the pairs finalize left to the reader; c.rmu is held. Not while
// the reader has records lent (it gives them back first: pollLocked), and not twice.
func (c *sameHostConn) reapLocked() {
	if c.lending.Load() {
		return
	}
	c.mu.Lock()
	graves := c.graves
	c.graves = nil
	c.graved.Store(false)
	c.mu.Unlock()
	for _, p := range graves {
		p.txMu.Lock() // a writer may be inside (WriteBatch)
		p.rxMu.Lock() // and a wait (sleep, ringsEmpty, awake)
		if !p.dead.Swap(true) {
			p.region.Close()
			p.peerEv.Close()
		}
		p.rxMu.Unlock()
		p.txMu.Unlock()
	}
}

// ---- closing ----

func (c *sameHostConn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	close(c.done)
	c.l.Close()
	c.rxEv.Signal() // a wait in poll(2) wakes and sees closed
	if c.ep != nil {
		c.ep.Close() // a ReadBatch parked in the netpoller returns
	}
	// The waits in poll(2) must end: the eventfd is shared with ReadBatch's wait, which
	// may drain a single signal before a poll(2) saw it, so signal until they are out.
	for !c.closeMu.TryLock() {
		c.rxEv.Signal()
		time.Sleep(100 * time.Microsecond)
	}
	// And the reads: one waiting in the socket's own wait (readDirect) holds rmu there
	// until it is interrupted, and then sees closed.
	for !c.rmu.TryLock() {
		c.inner.Interrupt()
		time.Sleep(100 * time.Microsecond)
	}
	// And what the reader still reads in place: it releases it when done (no read can
	// lend more while rmu is held here), and the rings are unmapped after that.
	c.viewMu.Lock()
	c.viewMu.Unlock()
	c.mu.Lock()
	rx := *c.rx.Load()
	c.mu.Unlock()
	// The far ends learn before the address is free for another device to bind
	// (shPair.gone); no pair is unmapped while rmu is held here.
	for _, p := range rx {
		if p.gone != nil && !p.dead.Load() {
			atomic.StoreUint32(p.gone, 1)
		}
	}
	err := c.inner.Close()
	for _, p := range rx {
		c.teardown(p, false)
	}
	c.reapLocked() // finalize left them to the reader: rmu is Close's
	c.mu.Lock()
	c.rxEv.Close()
	c.mu.Unlock()
	c.rmu.Unlock()
	c.closeMu.Unlock()
	return err
}

// closeWaiters releases what ListenSameHost made before it failed.
func (c *sameHostConn) closeWaiters() {
	if c.ep != nil {
		c.ep.Close()
	}
	c.rxEv.Close()
}

// JoinGroup joins a multicast group on the UDP Conn (Multicaster): multicast is
// delivered by the kernel to every member, so it never takes a ring.
func (c *sameHostConn) JoinGroup(group netip.Addr) (Conn, error) { return c.inner.JoinGroup(group) }
