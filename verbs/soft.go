package verbs

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/netio"
	"github.com/goverbs/goverbs/wire"
)

// SoftConfig describes a software RoCEv2 device: a UDP socket on one IP address that
// speaks RoCEv2 like an RNIC, inside this process.
type SoftConfig struct {
	// Name is the device name ("sw0" when empty).
	Name string
	// Addr is the IP address to bind (IPv4 or IPv6); its GID is the port's GID 0.
	Addr netip.Addr
	// Port is the UDP port to bind and to send to (4791, the RoCEv2 port, when zero).
	Port uint16
	// MTU is the port's active MTU. Zero derives it from the interface MTU as Linux rxe
	// does (interface MTU − 80, rounded down to an IB MTU: 4096 on loopback).
	MTU MTU
	// BusyPoll makes CQ polls read the socket themselves when the CQ is empty, the way
	// a DPDK poll-mode driver runs in the application's thread: a program spinning on
	// CQ.Poll sees packets without a goroutine hand-off. Traffic nobody polls for (a
	// passive WRITE target) is still served by a goroutine parked in the netpoller.
	BusyPoll bool
	// Conn, when set, is used instead of opening a UDP socket (for example a simulated
	// network from netio/simnet, or a netio.Tee recording to pcap). The device owns it.
	Conn netio.Conn
	// Recorder, when set, receives every datagram the device sends and receives
	// (a *pcap.Writer records them to a file Wireshark opens).
	Recorder netio.Recorder
	// Logger receives protocol events at debug level; nil logs nothing unless
	// GOVERBS_DEBUG is set.
	Logger *slog.Logger
}

// EnvDevices is the environment variable that lists the software devices Devices
// returns: comma-separated NAME=ADDR[:PORT] entries, for example
// "sw0=127.0.0.2,sw1=[::1]:4791". Unset, there is one device, sw0 on 127.0.0.1.
const EnvDevices = "GOVERBS_DEVICES"

// OpenSoft opens a software device bound to cfg.Addr (or using cfg.Conn).
func OpenSoft(cfg SoftConfig) (*Device, error) {
	if cfg.Name == "" {
		cfg.Name = "sw0"
	}
	info := softInfo(cfg)
	return openInfo(info)
}

func softInfo(cfg SoftConfig) DeviceInfo {
	return DeviceInfo{
		Name: cfg.Name, NodeGUID: nodeGUID(cfg.Addr), NodeType: NodeCA, Transport: "InfiniBand",
		provider: softProvider{}, soft: &cfg,
	}
}

type softProvider struct{}

func (softProvider) devices() ([]DeviceInfo, error) {
	spec := os.Getenv(EnvDevices)
	if spec == "" {
		return []DeviceInfo{softInfo(SoftConfig{Name: "sw0", Addr: netip.MustParseAddr("127.0.0.1")})}, nil
	}
	var out []DeviceInfo
	for _, ent := range strings.Split(spec, ",") {
		ent = strings.TrimSpace(ent)
		if ent == "" {
			continue
		}
		name, addr, ok := strings.Cut(ent, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("verbs: %s: entry %q is not NAME=ADDR[:PORT]", EnvDevices, ent)
		}
		cfg := SoftConfig{Name: name}
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			cfg.Addr, cfg.Port = ap.Addr(), ap.Port()
		} else if a, err := netip.ParseAddr(strings.Trim(addr, "[]")); err == nil {
			cfg.Addr = a
		} else {
			return nil, fmt.Errorf("verbs: %s: %q is not an IP address", EnvDevices, addr)
		}
		out = append(out, softInfo(cfg))
	}
	return out, nil
}

// nodeGUID makes a stable EUI-64-style GUID from the address (rxe derives it from the
// MAC; a software device on loopback has none).
func nodeGUID(a netip.Addr) uint64 {
	h := fnv.New64a()
	b, _ := a.MarshalBinary()
	h.Write(b)
	return 0x0200_00ff_fe00_0000 | h.Sum64()&0xffffff | (h.Sum64()>>24&0xff)<<32
}

// interfaceMTU finds the MTU of the interface that holds a.
func interfaceMTU(a netip.Addr) int {
	if a.IsLoopback() {
		if ifi, err := net.InterfaceByName("lo"); err == nil {
			return ifi.MTU
		}
		return 65536
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 1500
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() {
					return ifi.MTU
				}
			}
		}
	}
	return 1500
}

// warnBuffersOnce: the socket-buffer warning is the same for every device of a process
// (the limits are system-wide), so it is said once.
var warnBuffersOnce sync.Once

func (softProvider) open(info DeviceInfo) (deviceImpl, error) {
	cfg := *info.soft
	port := cfg.Port
	if port == 0 {
		port = wire.UDPPort
	}
	conn := cfg.Conn
	if conn == nil {
		if !cfg.Addr.IsValid() {
			return nil, fmt.Errorf("verbs: software device %s has no address", cfg.Name)
		}
		c, err := netio.ListenUDP(netip.AddrPortFrom(cfg.Addr, port), netio.UDPOptions{BusyPoll: cfg.BusyPoll})
		if err != nil {
			return nil, fmt.Errorf("verbs: open %s on %s: %w", cfg.Name, netip.AddrPortFrom(cfg.Addr, port), err)
		}
		conn = c
	}
	if cfg.Recorder != nil {
		conn = netio.Tee(conn, cfg.Recorder)
	}
	if msg := netio.BufferWarning(conn.Caps()); msg != "" {
		warnBuffersOnce.Do(func() {
			l := cfg.Logger
			if l == nil {
				l = slog.Default() // a degraded device should not stay silent
			}
			l.Warn(msg, "device", cfg.Name)
		})
	}
	addr := conn.LocalAddr().Addr()
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = wire.ActiveMTU(interfaceMTU(addr))
	}
	log := cfg.Logger
	if log == nil && os.Getenv("GOVERBS_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := engine.New(engine.Config{Name: cfg.Name, Conn: conn, PeerPort: port, MTU: mtu, Logger: log, BusyPoll: cfg.BusyPoll})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &softDevice{d: d, guid: info.NodeGUID}, nil
}

type softDevice struct {
	d    *engine.Device
	guid uint64
}

func (s *softDevice) close() error { return s.d.Close() }

func (s *softDevice) progress() bool {
	if !s.d.BusyPoll() {
		return false
	}
	s.d.PollRx()
	return true
}

func (s *softDevice) query() DeviceAttr {
	return DeviceAttr{
		FWVer: "0.1.0", NodeGUID: s.guid, SysImageGUID: s.guid, MaxMRSize: 1<<64 - 1,
		PageSizeCap: 0xfffff000, VendorID: 0xffffff, VendorPartID: 0, HWVer: 0,
		MaxQP: engine.MaxQP, MaxQPWR: engine.MaxQPWR, MaxSGE: engine.MaxSGE, MaxSGERd: engine.MaxSGE,
		MaxCQ: 1 << 14, MaxCQE: engine.MaxCQE, MaxMR: 1<<16 - 2, MaxPD: 1 << 16,
		MaxQPRdAtom: engine.MaxRdAtomic, MaxQPInitRdAtom: engine.MaxRdAtomic,
		MaxSRQ: 1 << 14, MaxSRQWR: engine.MaxQPWR, MaxSRQSGE: engine.MaxSGE, MaxAH: 1 << 15, MaxMW: 1 << 16,
		MaxInlineData: engine.MaxInline,
		AtomicCap:     AtomicHCA, PhysPortCnt: 1, MaxPKeys: 64,
	}
}

func (s *softDevice) queryPort(uint8) PortAttr {
	return PortAttr{
		State: PortActive, MaxMTU: MTU4096, ActiveMTU: s.d.ActiveMTU(), GIDTblLen: 1,
		MaxMsgSz: engine.MaxMsgSize, PKeyTblLen: 1, PhysState: 5, LinkLayer: "Ethernet",
		ActiveSpeed: "software", ActiveWidth: "1X",
	}
}

func (s *softDevice) gids(uint8) []GIDEntry {
	return []GIDEntry{{Index: 0, GID: GID(s.d.GID()), Type: "RoCE v2"}}
}

func (s *softDevice) counters() Counters {
	var out Counters
	s.d.Counters().Each(func(name string, v uint64) { out = append(out, Counter{name, v}) })
	return out
}

func (s *softDevice) allocPD() (pdImpl, error) {
	pd, err := s.d.AllocPD()
	if err != nil {
		return nil, err
	}
	return &softPD{dev: s, pd: pd}, nil
}

func (s *softDevice) createCQ(depth int) (cqImpl, error) {
	cq, err := s.d.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	c := &softCQ{cq: cq}
	cq.Owner = c
	return c, nil
}

func (s *softDevice) events() <-chan asyncEvent {
	out := make(chan asyncEvent, 16)
	go func() {
		defer close(out)
		for {
			select {
			case ev := <-s.d.Events():
				a := asyncEvent{typ: EventType(ev.Type), port: ev.Port}
				if ev.QP != nil {
					a.qp = softQPOf(ev.QP)
				}
				if ev.CQ != nil {
					a.cq = softCQOf(ev.CQ)
				}
				if ev.SRQ != nil {
					a.srq = softSRQOf(ev.SRQ)
				}
				select {
				case out <- a:
				case <-s.d.Done():
					return
				}
			case <-s.d.Done():
				return
			}
		}
	}()
	return out
}

type softPD struct {
	dev *softDevice
	pd  *engine.PD
}

func (p *softPD) close() error { return p.pd.Close() }

func (p *softPD) regMR(buf []byte, access Access) (mrImpl, error) {
	mr, err := p.pd.RegMR(buf, engine.Access(access))
	if err != nil {
		return nil, err
	}
	return softMR{mr}, nil
}

type softMR struct{ mr *engine.MR }

func (m softMR) close() error              { return m.mr.Close() }
func (m softMR) keys() (lkey, rkey uint32) { return m.mr.LKey(), m.mr.RKey() }
func (m softMR) addr() uint64              { return m.mr.Addr() }

func (p *softPD) createQP(attr *QPInitAttr) (qpImpl, error) {
	init := engine.QPInit{
		Type: engine.QPType(attr.Type), SendCQ: attr.SendCQ.impl.(*softCQ).cq, RecvCQ: attr.RecvCQ.impl.(*softCQ).cq,
		Cap:    engine.QPCap(attr.Cap),
		SigAll: attr.SigAll,
	}
	if attr.SRQ != nil {
		init.SRQ = attr.SRQ.impl.(*softSRQ).srq
	}
	qp, err := p.dev.d.CreateQP(p.pd, init)
	if err != nil {
		return nil, err
	}
	s := &softQP{qp: qp}
	qp.Owner = s
	return s, nil
}

func (p *softPD) createSRQ(attr SRQAttr) (srqImpl, error) {
	srq, err := p.dev.d.CreateSRQ(p.pd, int(attr.MaxWR), int(attr.MaxSGE))
	if err != nil {
		return nil, err
	}
	s := &softSRQ{srq: srq}
	srq.Owner = s
	if attr.SRQLimit > 0 {
		if err := srq.Arm(attr.SRQLimit); err != nil {
			srq.Close()
			return nil, err
		}
	}
	return s, nil
}

func (p *softPD) createAH(attr *AHAttr) (ahImpl, error) {
	return &engine.AH{
		DGID: attr.DGID, Addr: attr.DGID.Addr(), HopLimit: attr.HopLimit, TrafficClass: attr.TrafficClass,
		FlowLabel: attr.FlowLabel, SL: attr.SL, SGIDIndex: attr.SGIDIndex, Port: attr.Port,
	}, nil
}

type softCQ struct{ cq *engine.CQ }

func softCQOf(cq *engine.CQ) cqImpl {
	if o, ok := cq.Owner.(*softCQ); ok {
		return o
	}
	return nil
}

func (c *softCQ) close() error { return c.cq.Close() }
func (c *softCQ) depth() int   { return c.cq.Depth() }
func (c *softCQ) resize(n int) error {
	if err := c.cq.Resize(n); err != nil {
		return fmt.Errorf("verbs: resize CQ to %d: %w", n, err)
	}
	return nil
}
func (c *softCQ) requestNotify(s bool) error { return c.cq.RequestNotify(s) }
func (c *softCQ) setHandler(f func())        { c.cq.SetHandler(f) }

// poll hands the user's slice to the engine as is: verbs.WC and engine.WC have the same
// layout (checked by TestLayoutsMatch), so polling copies each completion once.
func (c *softCQ) poll(wcs []WC) (int, error) {
	n, err := c.cq.Poll(unsafe.Slice((*engine.WC)(unsafe.Pointer(unsafe.SliceData(wcs))), len(wcs)))
	if err != nil && errors.Is(err, engine.ErrCQOverflow) { // nil first: this runs in spin loops
		err = ErrCQOverflow
	}
	return n, err
}

type softQP struct {
	qp *engine.QP
}

func softQPOf(qp *engine.QP) qpImpl {
	if o, ok := qp.Owner.(*softQP); ok {
		return o
	}
	return nil
}

func (q *softQP) close() error         { return q.qp.Close() }
func (q *softQP) qpn() uint32          { return q.qp.QPN() }
func (q *softQP) state() QPState       { return QPState(q.qp.State()) }
func (q *softQP) counters() QPCounters { return QPCounters(q.qp.Counters()) }

func (q *softQP) modify(a *QPAttr, mask QPAttrMask) error {
	e := engine.QPAttr{
		State: engine.QPState(a.State), CurState: engine.QPState(a.CurState), PathMTU: a.PathMTU,
		QKey: a.QKey, RQPSN: wire.PSN(a.RQPSN), SQPSN: wire.PSN(a.SQPSN), DestQPN: a.DestQPN,
		AccessFlags: engine.Access(a.AccessFlags), Cap: engine.QPCap(a.Cap),
		AH: engine.AH{DGID: a.AH.DGID, Addr: a.AH.DGID.Addr(), HopLimit: a.AH.HopLimit, TrafficClass: a.AH.TrafficClass,
			FlowLabel: a.AH.FlowLabel, SL: a.AH.SL, SGIDIndex: a.AH.SGIDIndex, Port: a.AH.Port},
		PKeyIndex: a.PKeyIndex, Port: a.Port, MinRNRTimer: a.MinRNRTimer, Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic,
	}
	return q.qp.Modify(&e, engine.QPAttrMask(mask))
}

func (q *softQP) query() QPAttr {
	e := q.qp.Query()
	return QPAttr{
		State: QPState(e.State), CurState: QPState(e.CurState), PathMTU: e.PathMTU, QKey: e.QKey,
		RQPSN: uint32(e.RQPSN), SQPSN: uint32(e.SQPSN), DestQPN: e.DestQPN, AccessFlags: Access(e.AccessFlags),
		Cap: QPCap(e.Cap),
		AH: AHAttr{DGID: GID(e.AH.DGID), SGIDIndex: e.AH.SGIDIndex, HopLimit: e.AH.HopLimit, TrafficClass: e.AH.TrafficClass,
			FlowLabel: e.AH.FlowLabel, SL: e.AH.SL, Port: e.AH.Port},
		PKeyIndex: e.PKeyIndex, Port: e.Port, MinRNRTimer: e.MinRNRTimer, Timeout: e.Timeout,
		RetryCnt: e.RetryCnt, RNRRetry: e.RNRRetry, MaxRdAtomic: e.MaxRdAtomic, MaxDestRdAtomic: e.MaxDestRdAtomic,
	}
}

// postSend hands the batch to the engine without copying: SendWR and engine.SendWR have
// the same layout (TestLayoutsMatch) except the types behind the AH and Bind pointers.
// The engine reads the AH only on UD QPs and Bind only in BIND_MW requests, so those are
// converted one by one into a small stack batch.
func (q *softQP) postSend(wrs []SendWR) error {
	if q.qp.Type() != engine.QPTypeUD && !hasBind(wrs) {
		return mapPostErr(q.qp.PostSend(unsafe.Slice((*engine.SendWR)(unsafe.Pointer(unsafe.SliceData(wrs))), len(wrs))), 0)
	}
	var batch [16]engine.SendWR
	for base := 0; base < len(wrs); base += len(batch) {
		chunk := wrs[base:min(base+len(batch), len(wrs))]
		for i := range chunk {
			w := &chunk[i]
			batch[i] = engine.SendWR{
				ID: w.ID, Opcode: engine.WROpcode(w.Opcode), Flags: engine.SendFlags(w.Flags),
				SGL: unsafe.Slice((*engine.SGE)(unsafe.Pointer(unsafe.SliceData(w.SGL))), len(w.SGL)),
				Imm: w.Imm, RemoteQPN: w.RemoteQPN, RemoteQKey: w.RemoteQKey,
			}
			if w.AH != nil {
				batch[i].AH = w.AH.impl.(*engine.AH)
			}
			batch[i].RemoteAddr, batch[i].RKey = w.RemoteAddr, w.RKey
			batch[i].CompareAdd, batch[i].Swap = w.CompareAdd, w.Swap
			if w.Bind != nil {
				batch[i].Bind = &engine.BindMW{RKey: w.Bind.RKey}
				softBind(batch[i].Bind, w.Bind.MW, w.Bind.MWBind)
			}
		}
		if err := q.qp.PostSend(batch[:len(chunk)]); err != nil {
			return mapPostErr(err, base)
		}
	}
	return nil
}

func (q *softQP) postRecv(wrs []RecvWR) error {
	return mapPostErr(q.qp.PostRecv(unsafe.Slice((*engine.RecvWR)(unsafe.Pointer(unsafe.SliceData(wrs))), len(wrs))), 0)
}

func mapPostErr(err error, base int) error {
	if err == nil {
		return nil
	}
	var pe *engine.PostError
	if errors.As(err, &pe) {
		return &PostError{Index: base + pe.Index, Err: pe.Err}
	}
	return err
}

type softSRQ struct{ srq *engine.SRQ }

func softSRQOf(s *engine.SRQ) srqImpl {
	if o, ok := s.Owner.(*softSRQ); ok {
		return o
	}
	return nil
}

func (s *softSRQ) close() error { return s.srq.Close() }
func (s *softSRQ) postRecv(wrs []RecvWR) error {
	return mapPostErr(s.srq.PostRecv(unsafe.Slice((*engine.RecvWR)(unsafe.Pointer(unsafe.SliceData(wrs))), len(wrs))), 0)
}
func (s *softSRQ) arm(limit uint32) error { return s.srq.Arm(limit) }
func (s *softSRQ) query() SRQAttr {
	w, sge, lim := s.srq.Query()
	return SRQAttr{MaxWR: uint32(w), MaxSGE: uint32(sge), SRQLimit: lim}
}

// debugString describes a software QP's transport state (tests and logs).
func (qp *QP) debugString() string {
	if s, ok := qp.impl.(*softQP); ok {
		return s.qp.DebugString()
	}
	return ""
}

func hasBind(wrs []SendWR) bool {
	for i := range wrs {
		if wrs[i].Bind != nil || wrs[i].Opcode == WRBindMW {
			return true
		}
	}
	return false
}

// softBind fills an engine binding from the verbs one.
func softBind(dst *engine.BindMW, mw *MW, b MWBind) {
	if mw != nil {
		if s, ok := mw.impl.(*softMW); ok {
			dst.MW = s.mw
		}
	}
	if b.MR != nil {
		if s, ok := b.MR.impl.(softMR); ok {
			dst.MR = s.mr
		}
	}
	dst.Addr, dst.Length, dst.Access = b.Addr, b.Length, engine.Access(b.Access)
}

type softMW struct{ mw *engine.MW }

func (m *softMW) close() error { return m.mw.Close() }
func (m *softMW) rkey() uint32 { return m.mw.RKey() }

func (p *softPD) allocMW(t MWType) (mwImpl, error) {
	mw, err := p.pd.AllocMW(uint8(t))
	if err != nil {
		return nil, err
	}
	return &softMW{mw}, nil
}

func (q *softQP) bindMW(mw mwImpl, id uint64, flags SendFlags, b MWBind) (uint32, error) {
	var eb engine.BindMW
	softBind(&eb, nil, b)
	eb.MW = mw.(*softMW).mw
	rkey, err := q.qp.BindType1(id, engine.SendFlags(flags), eb)
	return rkey, mapPostErr(err, 0)
}
