package ibping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

const notes = `ibping -S answers pings of the OpenIB vendor class (0x32, OUI 0x001405 unless -o) on
QP1; ibping sends them and prints each reply and, at the end or on Ctrl-C, the
statistics. Differences from InfiniBand: there is no subnet manager and every LID is 0,
so the destination is a GID or an IP address (libibmad's vendor call refuses LID 0,
so infiniband-diags' ibping cannot ping a RoCE port); with -G it may also be a port
GUID as ibstat prints it, which for an IPv4 GID names the address (0x0000ffff7f000002
is 127.0.0.2). Both sides must be goverbs software devices: a kernel device's QP1
belongs to the kernel's MAD layer, which verbs programs cannot reach. The responder
shares QP1 with the connection manager; a goverbs device with no responder answers a
ping with "class not supported" (the ping is lost at once, not after the timeout).`

type options struct {
	dev     tool.DevOpts
	count   int
	counted bool // -c given: stop after count pings (0 included)
	flood   bool
	oui     string
	server  bool
	guid    bool
	lid     bool
	timeout int
}

// Run is the ibping command.
func Run(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "<dest gid|ip|guid>"
	fs.Notes = notes
	var o options
	o.dev.Tool = cmd.Name
	fs.IntOpt(&o.count, "c", "count", 0, "stop after `NUM` packets (default: until Ctrl-C)")
	fs.BoolOpt(&o.flood, "f", "flood", "flood destination")
	fs.StringOpt(&o.oui, "o", "oui", "0x001405", "use specified `OUI` number")
	fs.BoolOpt(&o.server, "S", "Server", "start in server mode")
	fs.BoolOpt(&o.lid, "L", "Lid", "use LID address argument (refused: RoCE ports have no LIDs)")
	fs.BoolOpt(&o.guid, "G", "Guid", "use GUID address argument (a port GUID, or a GID)")
	fs.IntOpt(&o.timeout, "t", "timeout", 1000, "timeout in `ms`")
	fs.StringOpt(&o.dev.Dev, "C", "Ca", "", "`CA` name to use (default the first device)")
	fs.IntOpt(&o.dev.IBPort, "P", "Port", 1, "Ca `PORT` number to use")
	fs.StringOpt(&o.dev.Bind, "", "bind", "", "run the software device on IP `ADDR` (each process on a host needs its own)")
	fs.StringOpt(&o.dev.Pcap, "", "pcap", "", "record the packets this side sends and receives to pcap `FILE`")
	fs.BoolOpt(&o.dev.Stats, "", "stats", "print the device's and the ping class's counters on stderr at exit")
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	o.counted = fs.Changed("count") // -c 0 sends none, as ibping's does
	oui, err := strconv.ParseUint(o.oui, 0, 24)
	if err != nil {
		return fmt.Errorf("invalid OUI %q", o.oui)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("Invalid timeout \"%d\".  Timeout requires a positive integer value", o.timeout)
	}
	var dst netip.Addr
	if !o.server {
		if len(pos) != 1 {
			fmt.Fprintf(os.Stderr, "goverbs %s: a destination is needed (see 'goverbs %s -h')\n", cmd.Name, cmd.Name)
			return tool.ErrUsage
		}
		if o.lid && !o.guid {
			return fmt.Errorf("can't resolve destination port %s: RoCE ports have no LIDs (every LID is 0); give the GID or IP address", pos[0])
		}
		if dst, err = parseDest(pos[0], o.guid); err != nil {
			return fmt.Errorf("can't resolve destination port %s: %v", pos[0], err)
		}
	}
	e, err := tool.OpenEndpoint(o.dev)
	if err != nil {
		return err
	}
	defer e.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.server {
		return serve(ctx, e, uint32(oui))
	}
	return ping(ctx, os.Stdout, e, dst, uint32(oui), o)
}

// parseDest reads the destination: an IP address or a GID, or with -G also a port GUID
// of an IPv4 GID. A bare number is a LID, which RoCE does not have.
func parseDest(s string, guid bool) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return netip.Addr{}, errors.New("not a GID, an IP address or a number")
	}
	if !guid {
		return netip.Addr{}, fmt.Errorf("LID %d: RoCE ports have no LIDs (every LID is 0); give the GID or IP address", n)
	}
	if n>>32 != 0xffff {
		return netip.Addr{}, fmt.Errorf("GUID %#016x: without a subnet manager only the GUID of an IPv4 GID (0x0000ffffAABBCCDD) names its port; give the GID", n)
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return netip.AddrFrom4(b), nil
}

// hostAndDomain is what the responder answers with, as ibping's server builds it: the
// host name, a dot and the NIS domain name when there is one (Linux says "(none)"
// when none is set, and ibping prints that too).
func hostAndDomain() string {
	h, err := os.Hostname()
	if err != nil {
		h = "?hostname?"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/domainname"); err == nil {
		if d := strings.TrimSpace(string(b)); d != "" {
			h += "." + d
		}
	}
	if len(h) >= DataLen {
		h = h[:DataLen-1]
	}
	return h
}

func serve(ctx context.Context, e *tool.Endpoint, oui uint32) error {
	r, err := Serve(e.Dev, hostAndDomain(), oui)
	if err != nil {
		return err
	}
	<-ctx.Done()
	r.Close()
	if e.Stats() {
		fmt.Fprintf(os.Stderr, "ibping server %v answered %d dropped %d\n", e.Addr, r.Answered.Load(), r.Dropped.Load())
	}
	return tool.ErrInterrupted // as ibping -S, which only a signal ends
}

// portID is what ibping's portid2str prints for the destination: the LID (always 0
// here) and the GID.
func portID(dst netip.Addr) string {
	return "Lid 0 Gid " + tool.GIDText(verbs.GIDFromAddr(dst))
}

// ms formats a duration as ibping does, milliseconds with three decimals.
func ms(d time.Duration) string {
	us := d.Microseconds()
	return fmt.Sprintf("%d.%03d", us/1000, us%1000)
}

func ping(ctx context.Context, w io.Writer, e *tool.Endpoint, dst netip.Addr, oui uint32, o options) error {
	p, err := NewPinger(e.Dev, oui, time.Duration(o.timeout)*time.Millisecond)
	if err != nil {
		return err
	}
	defer p.Close()
	var ntrans, replied, lost int64
	var minRTT, maxRTT, total time.Duration
	var lastHost string
	start := time.Now()
	for n := 0; !o.counted || n < o.count; n++ {
		if ctx.Err() != nil {
			break
		}
		ntrans++
		rtt, host, err := p.Ping(ctx, dst)
		if errors.Is(err, context.Canceled) {
			ntrans-- // cut short by Ctrl-C: neither answered nor lost
			break
		}
		if err != nil {
			lost++ // ibping says why only with -d; the statistics count it
		} else {
			replied++
			total += rtt
			if minRTT == 0 || rtt < minRTT {
				minRTT = rtt
			}
			maxRTT = max(maxRTT, rtt)
			if lastHost == "" {
				lastHost = host
			}
			if !o.flood {
				fmt.Fprintf(w, "Pong from %s (%s): time %s ms\n", host, portID(dst), ms(rtt))
			}
		}
		if !o.flood && (!o.counted || n+1 < o.count) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	elapsed := time.Since(start)
	loss := int64(0)
	if lost != 0 {
		loss = lost * 100 / ntrans
	}
	var avg time.Duration
	if replied > 0 {
		avg = total / time.Duration(replied)
	}
	fmt.Fprintf(w, "\n--- %s (%s) ibping statistics ---\n", lastHost, portID(dst))
	fmt.Fprintf(w, "%d packets transmitted, %d received, %d%% packet loss, time %d ms\n",
		ntrans, replied, loss, elapsed.Milliseconds())
	fmt.Fprintf(w, "rtt min/avg/max = %s/%s/%s ms\n", ms(minRTT), ms(avg), ms(maxRTT))
	if e.Stats() {
		c := e.Dev.GSICounters()
		fmt.Fprintf(os.Stderr, "ibping %v dropped %d gsi_delivered %d gsi_unknown_class %d gsi_malformed %d\n",
			e.Addr, p.Dropped.Load(), c.Delivered, c.UnknownClass, c.Malformed)
	}
	return nil // as ibping: the statistics are the result, whatever the loss
}
