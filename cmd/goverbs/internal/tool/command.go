// Package tool is the plumbing every goverbs command shares: the command type and its
// getopt-style flags, the local device a tool opens (with its pcap recording, its
// counters and its stat/asyncwatch socket), waiting on a CQ, Ctrl-C, and the CPU
// helpers of the busy loops.
package tool

import (
	"errors"

	"github.com/spf13/pflag"
)

// Command is one goverbs subcommand. Run parses its own flags from args, with a
// FlagSet made by NewFlagSet(cmd) so that its help page shows Summary.
type Command struct {
	Name    string
	Summary string
	Run     func(cmd *Command, args []string) error
}

// ErrUsage marks a command-line error whose one-line message is already printed.
var ErrUsage = errors.New("usage error")

// ErrHelp marks a help page already printed: the command exits 0.
var ErrHelp = pflag.ErrHelp

// ErrInterrupted ends a run that Ctrl-C stopped where it had nothing to report.
var ErrInterrupted = errors.New("interrupted")
