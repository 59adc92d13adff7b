package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// runVersion prints the module version goverbs was built from and the Go version that
// built it, as `go version -m` reads them from the binary.
func runVersion(cmd *tool.Command, args []string) error {
	if len(args) > 0 {
		fmt.Fprintln(os.Stderr, "goverbs version: takes no arguments")
		return tool.ErrUsage
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("the binary carries no build information")
	}
	writeVersion(os.Stdout, info)
	return nil
}

// writeVersion writes one line: the module version ("(devel)" for a build from a
// checkout before Go stamped one), the VCS revision when the build recorded it, and the
// Go version.
func writeVersion(w io.Writer, info *debug.BuildInfo) {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		version += " (" + rev[:min(len(rev), 12)] + modified + ")"
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(w, "goverbs %s %s\n", version, goVersion)
}
