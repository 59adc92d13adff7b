package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// errUsage marks a command-line error whose one-line message is already printed.
var errUsage = errors.New("usage error")

// flagSet is a flag.FlagSet in which each flag can have a short (-s) and a long
// (--size) name, as rdma-core and perftest's getopt_long options do. Go's flag package
// accepts -x and --x alike, so both spellings work with either name.
type flagSet struct {
	*flag.FlagSet
	name string
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by parse, as one line
	return &flagSet{FlagSet: fs, name: name}
}

func (f *flagSet) names(short, long string) []string {
	var out []string
	for _, n := range []string{short, long} {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

func (f *flagSet) intVar(p *int, short, long string, def int, usage string) {
	for _, n := range f.names(short, long) {
		f.IntVar(p, n, def, usage)
	}
}

func (f *flagSet) stringVar(p *string, short, long, def, usage string) {
	for _, n := range f.names(short, long) {
		f.StringVar(p, n, def, usage)
	}
}

func (f *flagSet) boolVar(p *bool, short, long string, usage string) {
	for _, n := range f.names(short, long) {
		f.BoolVar(p, n, false, usage)
	}
}

// parse parses args, allowing the server address anywhere among the flags as getopt
// does, and returns the positional arguments.
func (f *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(os.Stdout, "usage: goverbs %s [flags] [server address]\n", f.name)
				f.SetOutput(os.Stdout)
				f.PrintDefaults()
				return nil, flag.ErrHelp
			}
			fmt.Fprintf(os.Stderr, "goverbs %s: %v (see 'goverbs %s -h')\n", f.name, err, f.name)
			return nil, errUsage
		}
		rest := f.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneArg returns the single optional positional argument (the server's address).
func oneArg(name string, pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", nil
	case 1:
		return pos[0], nil
	}
	return "", fmt.Errorf("expected at most one server address, got %s", strings.Join(pos, " "))
}
