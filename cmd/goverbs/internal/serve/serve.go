// Package serve is `goverbs serve`: the daemon that runs shared software devices for
// every process of the user that attaches to them (internal/attach/server).
package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/verbs/soft"
)

// Run serves the devices the command line (NAME=ADDR[,NAME=ADDR...]) or
// GOVERBS_DEVICES lists until SIGINT or SIGTERM, or with --idle-exit until no process
// has been attached for that long (the C library's autostarted daemons).
func Run(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "[NAME=ADDR[,NAME=ADDR...]]"
	var spin, idle string
	var busy, verbose bool
	fs.StringOpt(&spin, "", "spin", "0", "poll a client's queues for `DURATION` after its last work before sleeping (for a daemon with cores of its own)")
	fs.StringOpt(&idle, "", "idle-exit", "0", "exit once no process has been attached for `DURATION` (0: never)")
	fs.BoolOpt(&busy, "", "busy-poll", "run the devices in busy-poll mode (the daemon's polls read the sockets)")
	fs.BoolOpt(&verbose, "v", "verbose", "log clients attaching and leaving")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(spin)
	if err != nil {
		return fmt.Errorf("invalid --spin %q: %v", spin, err)
	}
	idleExit, err := time.ParseDuration(idle)
	if err != nil || idleExit < 0 {
		return fmt.Errorf("invalid --idle-exit %q", idle)
	}
	var cfgs []soft.Config
	switch {
	case len(rest) > 1:
		return fmt.Errorf("one device list, comma-separated: %q", strings.Join(rest, " "))
	case len(rest) == 1:
		cfgs, err = soft.ParseDevices(rest[0])
	default:
		cfgs, err = soft.Configs()
	}
	if err != nil {
		return err
	}
	if len(cfgs) == 0 {
		return errors.New("no devices to serve")
	}
	for i := range cfgs {
		cfgs[i].Attach, cfgs[i].BusyPoll = false, busy
	}
	var log *slog.Logger
	if verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	srv, err := server.New(server.Config{Devices: cfgs, Spin: d, Logger: log})
	if err != nil {
		return err
	}
	for i, p := range srv.Sockets() {
		fmt.Printf("serving %s on %s (%s)\n", cfgs[i].Name, cfgs[i].Addr, p)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	waitIdle(sig, srv, idleExit)
	signal.Stop(sig)
	return srv.Close()
}

// waitIdle returns at a signal or, with idle > 0, once srv has had no client for idle
// (counted from the start too, so that a daemon nobody attaches to leaves as well).
func waitIdle(sig <-chan os.Signal, srv *server.Server, idle time.Duration) {
	if idle <= 0 {
		<-sig
		return
	}
	tick := time.NewTicker(min(idle/4, 250*time.Millisecond) + time.Millisecond)
	defer tick.Stop()
	since := time.Now()
	for {
		select {
		case <-sig:
			return
		case now := <-tick.C:
			if srv.Clients() > 0 {
				since = now
			} else if now.Sub(since) >= idle {
				return
			}
		}
	}
}
