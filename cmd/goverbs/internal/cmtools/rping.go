package cmtools

import (
	"bytes"
	"context"
	endian "encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/pcap"
	"github.com/goverbs/goverbs/verbs"
)

// rping is librdmacm's rping: a client and a server connected through the connection
// manager (no side channel), exchanging, per ping, the client's buffer advertisement
// (a SEND of address, rkey and length), the server's RDMA READ of it, a go-ahead SEND,
// a second advertisement, the server's RDMA WRITE of the data back and a last
// go-ahead; -V compares what came back. Same flags, same output, same exchange as
// rdma-core's librdmacm/examples/rping.c, so each side interoperates with the real one.

const (
	rpingSQDepth = 16
	rpingBufSize = 64 * 1024
	// rpingMinSize is rping's RPING_MIN_BUFSIZE: room for "rdma-ping-%d: " with the
	// largest int and its NUL, as sizeof counts them.
	rpingMinSize = len("2147483647") + 1 + len("rdma-ping-%d: ") + 1
	rpingInfoLen = 16 // struct rping_rdma_info: be64 buf, be32 rkey, be32 size
)

type rpingOpts struct {
	server, client bool
	addr, source   string
	port           int
	count, size    int
	verbose        bool
	validate       bool
	debug          bool
	persistent     bool
	pcap           string
	stats          bool
}

func RunRping(cmd *tool.Command, args []string) error {
	var o rpingOpts
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "" // the addresses are flags, as in librdmacm's rping
	fs.BoolOpt(&o.server, "s", "server", "server side")
	fs.BoolOpt(&o.client, "c", "client", "client side")
	fs.StringOpt(&o.addr, "a", "addr", "", "`ADDR`: the server's address (client), the address to listen on (server)")
	fs.StringOpt(&o.source, "I", "source", "", "source `ADDR` to bind to (client): its software device is used")
	fs.IntOpt(&o.port, "p", "port", 7174, "`PORT`")
	fs.IntOpt(&o.count, "C", "count", 0, "ping `COUNT` times (0: forever)")
	fs.IntOpt(&o.size, "S", "size", 64, "ping data `SIZE`")
	fs.BoolOpt(&o.verbose, "v", "verbose", "display ping data to stdout")
	fs.BoolOpt(&o.validate, "V", "validate", "validate ping data")
	fs.BoolOpt(&o.debug, "d", "debug", "debug printfs")
	fs.BoolOpt(&o.persistent, "P", "persistent", "persistent server mode allowing multiple connections")
	fs.StringOpt(&o.pcap, "", "pcap", "", "record the packets this side sends and receives to pcap `FILE`")
	fs.BoolOpt(&o.stats, "", "stats", "print the device's counters at exit")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q (the server's address goes after -a)", pos[0])
	}
	switch {
	case o.server == o.client:
		return errors.New("give exactly one of -s (server) and -c (client)")
	case o.size < rpingMinSize || o.size > rpingBufSize-1:
		return fmt.Errorf("Invalid size %d (valid range is %d to %d)", o.size, rpingMinSize, rpingBufSize)
	case o.count < 0:
		return fmt.Errorf("Invalid count %d", o.count)
	case o.port <= 0 || o.port > 65535:
		return fmt.Errorf("invalid port %d", o.port)
	case o.client && o.addr == "":
		return errors.New("the client needs the server's address (-a ADDR)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.server {
		return rpingServer(ctx, &o)
	}
	return rpingClient(ctx, &o)
}

// debugf is rping's DEBUG_LOG: stdout, with -d.
func (o *rpingOpts) debugf(format string, args ...any) {
	if o.debug {
		fmt.Printf(format, args...)
	}
}

// rpingDevice opens the software device for a local address: a configured device
// (GOVERBS_DEVICES) with that address if there is one, else a new one bound to it. An
// invalid addr means the first configured device.
func rpingDevice(pcapFile string, addr netip.Addr) (*verbs.Device, *pcap.Writer, error) {
	cfg := verbs.SoftConfig{Name: "rping0", Addr: addr}
	if info, ok := cm.DeviceFor(addr); ok {
		if _, soft := info.SoftConfig(); !soft {
			// A kernel device (rxe0, an RNIC): cm drives the kernel's rdma_cm on it
			// (builds with the ibverbs tag), and there is no pcap to record.
			dev, err := verbs.Open(info.Name)
			return dev, nil, err
		}
		cfg, _ = info.SoftConfig()
	} else if list, err := verbs.Devices(); err == nil && !addr.IsValid() {
		for _, info := range list {
			if sc, ok := info.SoftConfig(); ok {
				cfg = sc
				break
			}
		}
	}
	if !cfg.Addr.IsValid() {
		return nil, nil, errors.New("no software device to listen on (give -a ADDR)")
	}
	var rec *pcap.Writer
	if pcapFile != "" {
		w, err := pcap.Create(pcapFile)
		if err != nil {
			return nil, nil, fmt.Errorf("pcap: %w", err)
		}
		rec, cfg.Recorder = w, w
	}
	dev, err := verbs.OpenSoft(cfg)
	if err != nil {
		if rec != nil {
			rec.Close()
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			// tool.OpenErr's hint names the perf tools' --bind, which rping (-a, -I) lacks.
			return nil, nil, tool.InUseError{Msg: fmt.Sprintf("open device on %s: UDP port 4791 is in use there (another goverbs or rxe?); choose another local address", cfg.Addr)}
		}
		return nil, nil, tool.OpenErr(cfg.Addr.String(), err)
	}
	return dev, rec, nil
}

// rpingSession is one connection's resources: rping_cb's QP, CQ and buffers.
type rpingSession struct {
	o      *rpingOpts
	server bool
	pd     *verbs.PD
	cq     *tool.CQWaiter
	qp     *verbs.QP
	conn   *cm.Conn
	pend   []verbs.WC

	recvBuf, sendBuf []byte
	recvMR, sendMR   *verbs.MR
	rdmaBuf          []byte
	rdmaMR           *verbs.MR
	startBuf         []byte // the client's READ source
	startMR          *verbs.MR
}

// errRpingDisconnected: the connection ended while waiting (rping's DISCONNECTED state).
var errRpingDisconnected = errors.New("disconnected")

// newRpingSession is rping_setup_qp and rping_setup_buffers, and the first receive. On
// failure it releases what it made: a -P server goes on serving other clients.
func newRpingSession(o *rpingOpts, dev *verbs.Device, server bool) (*rpingSession, error) {
	s := &rpingSession{o: o, server: server}
	if err := s.open(dev); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *rpingSession) open(dev *verbs.Device) error {
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if s.cq, err = tool.NewCQ(dev, rpingSQDepth*2, false, false); err != nil {
		return err
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cq.CQ, RecvCQ: s.cq.CQ,
		Cap: verbs.QPCap{MaxSendWR: rpingSQDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	// In INIT, as rdma_create_qp leaves it, so that the first receive can be posted
	// before connecting.
	if err = cm.InitQP(s.qp); err != nil {
		return err
	}
	// Each buffer on pages of its own, which an attached device (goverbs serve)
	// requires of registered memory; each MR covers its buffer's pages.
	s.recvBuf, s.sendBuf = pageBuf(rpingInfoLen), pageBuf(rpingInfoLen)
	s.rdmaBuf = pageBuf(s.o.size)
	rw := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if s.recvMR, err = s.pd.RegMR(pages(s.recvBuf), verbs.AccessLocalWrite); err != nil {
		return err
	}
	if s.sendMR, err = s.pd.RegMR(pages(s.sendBuf), 0); err != nil {
		return err
	}
	if s.rdmaMR, err = s.pd.RegMR(pages(s.rdmaBuf), rw); err != nil {
		return err
	}
	if !s.server {
		s.startBuf = pageBuf(s.o.size)
		if s.startMR, err = s.pd.RegMR(pages(s.startBuf), rw); err != nil {
			return err
		}
	}
	return s.postRecv()
}

func (s *rpingSession) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	for _, mr := range []*verbs.MR{s.recvMR, s.sendMR, s.rdmaMR, s.startMR} {
		if mr != nil {
			mr.Close()
		}
	}
	if s.qp != nil {
		s.qp.Close()
	}
	if s.cq != nil {
		s.cq.Close()
	}
	if s.pd != nil {
		s.pd.Close()
	}
}

// param is rping_init_conn_param.
func (s *rpingSession) param() *cm.Param {
	return &cm.Param{QP: s.qp, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}

func (s *rpingSession) postRecv() error {
	return s.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{s.recvMR.SGE(0, rpingInfoLen)}})
}

// send posts the send buffer (an advertisement or a go-ahead), signaled as rping's.
func (s *rpingSession) send() error {
	return s.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{s.sendMR.SGE(0, rpingInfoLen)}})
}

// advertise formats the send buffer with mr's address, rkey and the ping size
// (rping_format_send) and sends it.
func (s *rpingSession) advertise(mr *verbs.MR) error {
	endian.BigEndian.PutUint64(s.sendBuf[0:], mr.Addr())
	endian.BigEndian.PutUint32(s.sendBuf[8:], mr.RKey())
	endian.BigEndian.PutUint32(s.sendBuf[12:], uint32(s.o.size))
	s.o.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), s.o.size)
	return s.send()
}

// await returns the next completion of kind op, passing over send completions (as
// rping's CQ thread only logs them). A flushed work request means the connection went
// down: errRpingDisconnected.
func (s *rpingSession) await(op verbs.WCOpcode) (verbs.WC, error) {
	for {
		for len(s.pend) > 0 {
			wc := s.pend[0]
			s.pend = s.pend[1:]
			switch {
			case wc.Status == verbs.WCWRFlushErr:
				return wc, errRpingDisconnected
			case wc.Status != verbs.WCSuccess:
				return wc, fmt.Errorf("cq completion failed status %d", wc.Status)
			case wc.Opcode == op:
				return wc, nil
			case wc.Opcode != verbs.WCSend:
				return wc, errors.New("unknown!!!!! completion")
			}
		}
		wcs, err := s.cq.Wait()
		if err != nil {
			if s.conn != nil {
				select {
				case <-s.conn.Done():
					return verbs.WC{}, errRpingDisconnected
				default:
				}
			}
			return verbs.WC{}, err
		}
		s.pend = append(s.pend[:0], wcs...)
	}
}

// recvInfo waits for the peer's 16-byte message and reposts the receive.
func (s *rpingSession) recvInfo() (addr uint64, rkey, size uint32, err error) {
	wc, err := s.await(verbs.WCRecv)
	if err != nil {
		return 0, 0, 0, err
	}
	if wc.ByteLen != rpingInfoLen {
		return 0, 0, 0, fmt.Errorf("Received bogus data, size %d", wc.ByteLen)
	}
	addr, rkey, size = endian.BigEndian.Uint64(s.recvBuf), endian.BigEndian.Uint32(s.recvBuf[8:]),
		endian.BigEndian.Uint32(s.recvBuf[12:])
	if err := s.postRecv(); err != nil {
		return 0, 0, 0, fmt.Errorf("post recv error: %v", err)
	}
	return addr, rkey, size, nil
}

// cString is the bytes of b up to its first NUL, as printf's %s reads them.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}
