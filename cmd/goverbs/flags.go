package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// errUsage marks a command-line error whose one-line message is already printed.
var errUsage = errors.New("usage error")

// errHelp marks a help page already printed: the command exits 0.
var errHelp = pflag.ErrHelp

// flagSet parses a command's flags as rdma-core and perftest do with getopt_long:
// short flags bundle and take their value attached or apart (-aF, -s4096, -s 4096),
// long flags take it after = or apart (--size=4096, --size 4096), and the server
// address may stand anywhere among them. spf13/pflag implements exactly these GNU rules.
type flagSet struct {
	*pflag.FlagSet
	name    string
	args    string // what follows the flags in the usage line
	parsing bool   // names are matched as getopt_long matches them (longName)
}

func newFlagSet(name string) *flagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by parse, as one line
	fs.SortFlags = false     // the help lists flags in the order the command registers them
	f := &flagSet{FlagSet: fs, name: name, args: "[server address]"}
	fs.SetNormalizeFunc(f.longName)
	return f
}

// longSpellings are long names perftest's getopt_long accepts beside the ones its
// help prints.
var longSpellings = map[string]string{"report-histogrm": "report-histogram"}

// longName resolves a long flag as getopt_long does: an unambiguous prefix names its
// flag (--iter=100, --conn UD), and perftest's other spellings are accepted.
func (f *flagSet) longName(fs *pflag.FlagSet, name string) pflag.NormalizedName {
	if !f.parsing {
		return pflag.NormalizedName(name) // registering: names are as given
	}
	if to, ok := longSpellings[name]; ok {
		return pflag.NormalizedName(to)
	}
	var match string
	n := 0
	fs.VisitAll(func(fl *pflag.Flag) {
		switch {
		case fl.Name == name:
			match, n = name, -1 // exact: always wins
		case n >= 0 && strings.HasPrefix(fl.Name, name):
			match = fl.Name
			n++
		}
	})
	if n == -1 || n == 1 {
		return pflag.NormalizedName(match)
	}
	return pflag.NormalizedName(name) // unknown or ambiguous: pflag reports it
}

func (f *flagSet) intVar(p *int, short, long string, def int, usage string) {
	f.IntVarP(p, long, short, def, usage)
}

func (f *flagSet) stringVar(p *string, short, long, def, usage string) {
	f.StringVarP(p, long, short, def, usage)
}

func (f *flagSet) boolVar(p *bool, short, long string, usage string) {
	f.BoolVarP(p, long, short, false, usage)
}

// usage writes the command's help page: one line per flag, short and long form together.
func (f *flagSet) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: goverbs %s\n", strings.TrimSpace(f.name+" [flags] "+f.args))
	if c, ok := commands[f.name]; ok {
		fmt.Fprintf(w, "\n%s\n", c.summary)
	}
	if !f.HasAvailableFlags() {
		return
	}
	fmt.Fprintf(w, "\nflags:\n")
	var lines [][2]string
	width := 0
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden {
			return
		}
		arg, text := pflag.UnquoteUsage(fl)
		left := "    "
		if fl.Shorthand != "" {
			left = "-" + fl.Shorthand + ", "
		}
		left += "--" + fl.Name
		if fl.Value.Type() == "bool" {
			arg = ""
		}
		if arg != "" {
			left += " " + arg
		}
		if fl.Value.Type() != "bool" && fl.DefValue != "" && fl.DefValue != "0" && fl.DefValue != "0s" && fl.DefValue != "[]" {
			text += fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		lines = append(lines, [2]string{left, text})
		width = max(width, len(left))
	})
	for _, l := range lines {
		fmt.Fprintf(w, "  %-*s  %s\n", width, l[0], l[1])
	}
}

// parse parses args and returns the positional arguments. -h/--help prints the help
// page and returns errHelp.
func (f *flagSet) parse(args []string) ([]string, error) {
	f.parsing = true
	if err := f.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			f.usage(os.Stdout)
			return nil, errHelp
		}
		if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
			if m := f.prefixed(name); len(m) > 1 { // as getopt_long words it
				err = fmt.Errorf("option '--%s' is ambiguous; possibilities: --%s", name, strings.Join(m, " --"))
			}
		}
		fmt.Fprintf(os.Stderr, "goverbs %s: %v (see 'goverbs %s -h')\n", f.name, err, f.name)
		return nil, errUsage
	}
	return f.Args(), nil
}

// prefixed lists the long flags that begin with name.
func (f *flagSet) prefixed(name string) []string {
	var out []string
	f.VisitAll(func(fl *pflag.Flag) {
		if strings.HasPrefix(fl.Name, name) {
			out = append(out, fl.Name)
		}
	})
	return out
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
