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
// GOVERBS_DEVICES lists until SIGINT or SIGTERM.
func Run(cmd *tool.Command, args []string) error {
	fs := tool.NewFlagSet(cmd)
	fs.ArgsUsage = "[NAME=ADDR[,NAME=ADDR...]]"
	var spin string
	var busy, verbose bool
	fs.StringOpt(&spin, "", "spin", "0", "poll a client's queues for `DURATION` after its last work before sleeping (for a daemon with cores of its own)")
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
	<-sig
	signal.Stop(sig)
	return srv.Close()
}
