package tool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// FlagSet parses a command's flags as rdma-core and perftest do with getopt_long:
// short flags bundle and take their value attached or apart (-aF, -s4096, -s 4096),
// long flags take it after = or apart (--size=4096, --size 4096), and the server
// address may stand anywhere among them. spf13/pflag implements exactly these GNU rules.
type FlagSet struct {
	*pflag.FlagSet
	// ArgsUsage is what follows the flags in the usage line: by default the server's
	// address, "" for a command that takes none.
	ArgsUsage string
	// Notes, when set, end the help page: what the command does differently from the
	// tool it is named after.
	Notes   string
	name    string
	summary string
	parsing bool // names are matched as getopt_long matches them (longName)
}

// NewFlagSet returns the flags of cmd, for its Run to fill.
func NewFlagSet(cmd *Command) *FlagSet {
	fs := pflag.NewFlagSet(cmd.Name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by ParseArgs, as one line
	fs.SortFlags = false     // the help lists flags in the order the command registers them
	f := &FlagSet{FlagSet: fs, name: cmd.Name, summary: cmd.Summary, ArgsUsage: "[server address]"}
	fs.SetNormalizeFunc(f.longName)
	return f
}

// longSpellings are long names perftest's getopt_long accepts beside the ones its
// help prints.
var longSpellings = map[string]string{"report-histogrm": "report-histogram"}

// longName resolves a long flag as getopt_long does: an unambiguous prefix names its
// flag (--iter=100, --conn UD), and perftest's other spellings are accepted.
func (f *FlagSet) longName(fs *pflag.FlagSet, name string) pflag.NormalizedName {
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

// IntOpt adds an int flag with a short (may be "") and a long name.
func (f *FlagSet) IntOpt(p *int, short, long string, def int, usage string) {
	f.IntVarP(p, long, short, def, usage)
}

// StringOpt adds a string flag with a short (may be "") and a long name.
func (f *FlagSet) StringOpt(p *string, short, long, def, usage string) {
	f.StringVarP(p, long, short, def, usage)
}

// BoolOpt adds a bool flag with a short (may be "") and a long name.
func (f *FlagSet) BoolOpt(p *bool, short, long string, usage string) {
	f.BoolVarP(p, long, short, false, usage)
}

// printHelp writes the command's help page: one line per flag, short and long form together.
func (f *FlagSet) printHelp(w io.Writer) {
	fmt.Fprintf(w, "usage: goverbs %s\n", strings.TrimSpace(f.name+" [flags] "+f.ArgsUsage))
	if f.summary != "" {
		fmt.Fprintf(w, "\n%s\n", f.summary)
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
	if f.Notes != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(f.Notes, "\n"))
	}
}

// ParseArgs parses args and returns the positional arguments. -h/--help prints the
// help page and returns ErrHelp.
func (f *FlagSet) ParseArgs(args []string) ([]string, error) {
	f.parsing = true
	if err := f.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			f.printHelp(os.Stdout)
			return nil, ErrHelp
		}
		if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
			if m := f.prefixed(name); len(m) > 1 { // as getopt_long words it
				err = fmt.Errorf("option '--%s' is ambiguous; possibilities: --%s", name, strings.Join(m, " --"))
			}
		}
		fmt.Fprintf(os.Stderr, "goverbs %s: %v (see 'goverbs %s -h')\n", f.name, err, f.name)
		return nil, ErrUsage
	}
	return f.Args(), nil
}

// prefixed lists the long flags that begin with name.
func (f *FlagSet) prefixed(name string) []string {
	var out []string
	f.VisitAll(func(fl *pflag.Flag) {
		if strings.HasPrefix(fl.Name, name) {
			out = append(out, fl.Name)
		}
	})
	return out
}

// OneArg returns the single optional positional argument (the server's address).
func OneArg(pos []string) (string, error) {
	switch len(pos) {
	case 0:
		return "", nil
	case 1:
		return pos[0], nil
	}
	return "", fmt.Errorf("expected at most one server address, got %s", strings.Join(pos, " "))
}

// ParseFlagsOnly parses args, which must hold flags only: librdmacm's tools take the
// server's address after -s.
func ParseFlagsOnly(fs *FlagSet, args []string) error {
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q (the server's address goes after -s)", pos[0])
	}
	return nil
}
