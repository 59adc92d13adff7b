package cmtools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/goverbs/goverbs/cm"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// cmtestOpts are the flags librdmacm's cmatose and udaddy share (their common.c and
// option parsing).
type cmtestOpts struct {
	server, bind string
	port         int
	connections  int
	count, size  int
	portSpace    string
	pcap         string
	stats        bool
}

// cmtest is one of librdmacm's cmatose-style examples: its name, the one port space
// it speaks, its port (a -p flag only when portFlag: udaddy's is fixed), and its
// two sides.
type cmtest struct {
	name           string
	portSpace      string
	port           int
	portFlag       bool
	client, server func(context.Context, *cmtestOpts) error
}

// run parses args, runs the side they ask for, and ends with the two lines the C
// examples end with.
func (t *cmtest) run(cmd *tool.Command, args []string) error {
	o := cmtestOpts{port: t.port}
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "" // the addresses are flags, as in librdmacm's examples
	fs.StringOpt(&o.server, "s", "server", "", "server `ADDRESS` (client mode)")
	fs.StringOpt(&o.bind, "b", "bind", "", "bind `ADDRESS`: the local software device's")
	if t.portFlag {
		fs.IntOpt(&o.port, "p", "port", t.port, "`PORT`")
	}
	fs.IntOpt(&o.connections, "c", "connections", 1, "`CONNECTIONS`")
	fs.IntOpt(&o.count, "C", "count", 10, "message `COUNT`")
	fs.IntOpt(&o.size, "S", "size", 100, "message `SIZE`")
	fs.StringOpt(&o.portSpace, "P", "port-space", t.portSpace, "port `SPACE` ("+t.portSpace+")")
	sideFlags(fs, &o.pcap, &o.stats)
	if err := tool.ParseFlagsOnly(fs, args); err != nil {
		return err
	}
	switch {
	case !strings.EqualFold(o.portSpace, t.portSpace):
		return fmt.Errorf("port space %q: only %s is supported", o.portSpace, t.portSpace)
	case o.connections < 1 || o.count < 0 || o.size < 0:
		return errors.New("connections must be at least 1, count and size not negative")
	case o.port <= 0 || o.port > 65535:
		return fmt.Errorf("invalid port %d", o.port)
	}
	if o.size == 0 {
		o.count = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var status error
	if o.server != "" {
		status = t.client(ctx, &o)
	} else {
		status = t.server(ctx, &o)
	}
	fmt.Println("test complete")
	code := 0
	if status != nil {
		code = -1 // the error itself is goverbs' last line, on stderr
	}
	fmt.Printf("return status %d\n", code)
	return status
}

// cmtestNodes are a test's cmatest_nodes, of either kind, so that one deferred close
// ends them all and one loop serves each phase.
type cmtestNodes[N interface{ close() }] []N

func (ns cmtestNodes[N]) close() {
	for _, n := range ns {
		n.close()
	}
}

// each runs f on every node in turn, up to the first error.
func (ns cmtestNodes[N]) each(f func(N) error) error {
	for _, n := range ns {
		if err := f(n); err != nil {
			return err
		}
	}
	return nil
}

// accept is the server's connect loop: for each of want requests on l a new node, or
// the request rejected when there is none, and the node accepted.
func (ns *cmtestNodes[N]) accept(ctx context.Context, name string, l *cm.Listener, want int,
	newNode func() (N, error), accept func(*cm.Request, N) error) error {
	for len(*ns) < want {
		req, err := l.Accept(ctx)
		if err != nil {
			return err
		}
		n, err := newNode()
		if err != nil {
			fmt.Println(name + ": failing connection request")
			req.Reject(nil)
			return err
		}
		*ns = append(*ns, n)
		if err := accept(req, n); err != nil {
			return fmt.Errorf("%s: failure accepting: %v", name, err)
		}
	}
	return nil
}

// connect is the client's connect loop: want new nodes, each connected in turn.
func (ns *cmtestNodes[N]) connect(want int, newNode func() (N, error), connect func(N) error) error {
	for range want {
		n, err := newNode()
		if err != nil {
			return err
		}
		*ns = append(*ns, n)
		if err := connect(n); err != nil {
			return err
		}
	}
	return nil
}

// pollN waits for count successful completions on w (poll_cqs), handing each to seen
// when it is not nil; name prefixes the errors as the tool's own.
func pollN(name string, w *tool.CQWaiter, count int, seen func(*verbs.WC) error) error {
	for done := 0; done < count; {
		wcs, err := w.Wait()
		if err != nil {
			return fmt.Errorf("%s: failed polling CQ: %v", name, err)
		}
		for i := range wcs {
			if wcs[i].Status != verbs.WCSuccess {
				return fmt.Errorf("%s: completion failed: %v", name, wcs[i].Status)
			}
			done++
			if seen != nil {
				if err := seen(&wcs[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
