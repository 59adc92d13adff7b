package rstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/rdmanet"
)

// udpong is librdmacm's udpong: a datagram benchmark whose client runs latency tests
// (each datagram echoed) and bandwidth tests (datagrams one way, the server counting
// what arrived) of a list of sizes, over rdmanet's datagram rsockets (PacketConn), or
// over Go's UDP with -T s. Flags, messages, sizes, counts and the result table are
// udpong.c's (rdma-core librdmacm/examples): the first bytes of each datagram are
// op, client id, sequence number, reserved and a big-endian 32-bit value. Go's calls
// block the goroutine, so -T a (poll), b and n (blocking or not) change nothing here.
// As in udpong, the server serves until it is stopped.

const udpongPort = "7174"

// udpongSizes is udpong's list of test sizes.
var udpongSizes = []int{1 << 6, 1 << 7, 1<<7 + 1<<6, 1 << 8, 1<<8 + 1<<7, 1 << 9, 1<<9 + 1<<8, 1 << 10, 1<<10 + 1<<9}

// udpong's message ops, and the size of its control messages.
const (
	opLogin = iota
	opStart
	opData
	opEcho
	opEnd
	ctrlSize = 16
)

type udpongOptions struct {
	server, bind, port string
	bufSize, count     int
	size               int
	tests              []string
	udp, echo, custom  bool
	out                io.Writer
}

// RunUdpong is the udpong command.
func RunUdpong(cmd *tool.Command, args []string) error {
	o := udpongOptions{count: 1000, size: 1000, out: os.Stdout}
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = ""
	fs.StringOpt(&o.server, "s", "server", "", "send to the server at `ADDR` (without it, be the server)")
	fs.StringOpt(&o.bind, "b", "bind", "", "`ADDR` to bind: the server's address; the client's device address (udpong's client binds none)")
	fs.IntOpt(&o.bufSize, "B", "buffer", 0, "socket buffer `SIZE` in bytes (UDP; rdmanet's queues have a fixed depth)")
	fs.IntOpt(&o.count, "C", "count", 1000, "`N` transfers (a custom test)")
	fs.IntOpt(&o.size, "S", "size", 1000, "transfer `SIZE` in bytes, at least 16 (a custom test)")
	fs.StringOpt(&o.port, "p", "port", udpongPort, "`PORT`")
	fs.StringArrayVarP(&o.tests, "test", "T", nil, "test `OPTION`: s|socket (Go UDP), e|echo (the server echoes every datagram), a|async, b|blocking, n|nonblocking (no difference in Go)")
	if err := tool.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	for _, t := range o.tests {
		switch strings.ToLower(t) {
		case "s", "socket", "sockets":
			o.udp = true
		case "e", "echo":
			o.echo = true
		case "a", "async", "b", "block", "blocking", "n", "nonblock", "nonblocking":
		default:
			return fmt.Errorf("-T %s: unknown test option (s, a, b, n or e)", t)
		}
	}
	o.custom = fs.Changed("count") || fs.Changed("size")
	switch {
	case o.size < ctrlSize:
		return fmt.Errorf("size must be at least %d bytes", ctrlSize)
	case o.size > 2020 && !o.udp:
		return fmt.Errorf("-S %d: an rsockets datagram carries at most 2020 bytes (2032 on IPv4)", o.size)
	case o.size > 65507:
		return fmt.Errorf("-S %d: more than a UDP datagram holds", o.size)
	case o.count <= 0:
		return fmt.Errorf("-C %d: transfers must be at least 1", o.count)
	case o.bufSize < 0:
		return fmt.Errorf("-B %d: a size in bytes", o.bufSize)
	}
	if p, err := strconv.Atoi(o.port); err != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("-p %s: a port number", o.port)
	}
	in := tool.NewInterrupter("udpong")
	defer in.Stop()
	if o.server == "" {
		return in.Result(o.serve(in))
	}
	return in.Result(o.client(in))
}

func (o *udpongOptions) network() string {
	if o.udp {
		return "udp"
	}
	return rdmanet.Network
}

// open opens the socket at host (empty: the default device's address, or every
// address for UDP) and port.
func (o *udpongOptions) open(host, port string) (net.PacketConn, error) {
	if host != "" {
		a, err := tool.ResolveHost(host)
		if err != nil {
			return nil, err
		}
		host = a.String()
	}
	var c net.PacketConn
	var err error
	if o.udp {
		c, err = net.ListenPacket("udp", net.JoinHostPort(host, port))
	} else {
		if host == "" {
			a, ok := defaultSoftDevice()
			if !ok {
				return nil, errors.New("no software device to bind (give -b ADDR)")
			}
			host = a.String()
		}
		c, err = rdmanet.ListenPacket(rdmanet.Network, net.JoinHostPort(host, port))
	}
	if err != nil {
		return nil, err
	}
	if uc, ok := c.(*net.UDPConn); ok && o.bufSize > 0 {
		uc.SetReadBuffer(o.bufSize)
		uc.SetWriteBuffer(o.bufSize)
	}
	return c, nil
}

// serve is udpong's svr_run: answer logins, starts, echoes and ends, count data.
func (o *udpongOptions) serve(in *tool.Interrupter) error {
	c, err := o.open(o.bind, o.port)
	if err != nil {
		return fmt.Errorf("%s bind: %w", o.network(), err)
	}
	in.OnStop(func() { c.Close() })
	defer c.Close()
	var recvcnt [256]uint64
	var id uint8
	msg := make([]byte, 2048+8)
	for {
		n, from, err := c.ReadFrom(msg)
		if err != nil {
			return fmt.Errorf("rrecv: %w", err)
		}
		if n < 4 {
			continue // not udpong's
		}
		switch msg[0] {
		case opLogin:
			host, _, _ := net.SplitHostPort(from.String())
			fmt.Fprintf(o.out, "client login from %s\n", host)
			msg[1] = id
			id++
			recvcnt[msg[1]] = 0
		case opStart:
			recvcnt[msg[1]] = 0
		case opEcho:
			recvcnt[msg[1]]++
		case opEnd:
			if n < 8 {
				continue
			}
			binary.BigEndian.PutUint32(msg[4:], uint32(recvcnt[msg[1]]))
		default:
			recvcnt[msg[1]]++
			continue
		}
		if _, err := c.WriteTo(msg[:n], from); err != nil {
			return fmt.Errorf("rsend: %w", err)
		}
	}
}

// udpongClient is the client's state: its socket, the server, the message.
type udpongClient struct {
	o     *udpongOptions
	c     net.PacketConn
	to    *net.UDPAddr
	msg   []byte // g_msg: what goes out, and what the answer put back
	rbuf  []byte
	seqno uint8
}

// client is udpong's client_run: log in, then the tests, each a row.
func (o *udpongOptions) client(in *tool.Interrupter) error {
	fmt.Fprintf(o.out, "%-10s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "total", "time", "Gb/sec", "usec/xfer")
	server, err := tool.ResolveHost(o.server)
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(o.port)
	bind := o.bind
	if bind == "" && !o.udp {
		if a, err := cm.SourceAddr(server); err == nil {
			bind = a.String()
		}
	}
	c, err := o.open(bind, "0")
	if err != nil {
		return fmt.Errorf("%s socket: %w", o.network(), err)
	}
	in.OnStop(func() { c.Close() })
	defer c.Close()
	u := &udpongClient{o: o, c: c, to: net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, uint16(port))),
		msg: make([]byte, 2048+8), rbuf: make([]byte, 2048+8)}
	u.msg[0] = opLogin
	if err := u.sendRecv(ctrlSize, time.Second); err != nil {
		return err
	}
	if o.custom {
		return u.runTest("custom", o.size, o.count, o.echo)
	}
	for _, s := range udpongSizes {
		if err := u.runTest(sizeStr(int64(s))+"_lat", s, transferCount(s)/10, true); err != nil {
			return err
		}
	}
	for _, s := range udpongSizes {
		if err := u.runTest(sizeStr(int64(s))+"_bw", s, transferCount(s), false); err != nil {
			return err
		}
	}
	return nil
}

// send is udpong's client_send: one datagram of the message's first size bytes.
func (u *udpongClient) send(size int) error {
	if _, err := u.c.WriteTo(u.msg[:size], u.to); err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	return nil
}

// sendRecv is udpong's client_send_recv: send, and send again until the answer with
// this sequence number comes within timeout; the answer becomes the message. Unlike
// udpong.c, which sends again after any answer of another sequence number (a late answer
// to a message sent twice) and so keeps every such duplicate alive, a late answer is
// read past here: on a loaded machine, where a round trip sometimes passes the 1 ms of the
// echo test, the duplicates would otherwise pile up and slow every later exchange.
func (u *udpongClient) sendRecv(size int, timeout time.Duration) error {
	u.msg[2] = u.seqno
	for {
		if err := u.send(size); err != nil {
			return err
		}
		u.c.SetReadDeadline(time.Now().Add(timeout))
		for {
			n, _, err := u.c.ReadFrom(u.rbuf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break // send again
			}
			if err != nil {
				return fmt.Errorf("rrecv: %w", err)
			}
			if n > 2 && u.rbuf[2] == u.seqno {
				copy(u.msg, u.rbuf[:n])
				u.seqno++
				return nil
			}
		}
	}
}

// runTest is udpong's run_test and show_perf.
func (u *udpongClient) runTest(name string, size, count int, echo bool) error {
	u.msg[0] = opStart
	if err := u.sendRecv(ctrlSize, time.Second); err != nil {
		return err
	}
	u.msg[0] = opData
	if echo {
		u.msg[0] = opEcho
	}
	start := time.Now()
	for range count {
		var err error
		if echo {
			err = u.sendRecv(size, time.Millisecond)
		} else {
			err = u.send(size)
		}
		if err != nil {
			return err
		}
	}
	u.msg[0] = opEnd
	if err := u.sendRecv(ctrlSize, time.Millisecond); err != nil {
		return err
	}
	d := time.Since(start)
	transfers := int64(count) * 2
	if !echo {
		transfers = int64(binary.BigEndian.Uint32(u.msg[4:]))
	}
	usec := float64(d.Nanoseconds()) / 1e3
	bytes := transfers * int64(size)
	perXfer := 0.0
	if transfers > 0 {
		perXfer = usec / float64(transfers)
	}
	fmt.Fprintf(u.o.out, "%-10s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", name, sizeStr(int64(size)), cntStr(transfers),
		sizeStr(bytes), usec/1e6, float64(bytes)*8/(1000*usec), perXfer)
	return nil
}
