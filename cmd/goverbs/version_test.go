package main

import (
	"bytes"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	cases := []struct {
		info debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}}, "goverbs v0.2.0 go1.26.8\n"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}},
			"goverbs (devel) (0123456789ab+dirty) go1.26.8\n"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		writeVersion(&b, &c.info)
		if b.String() != c.want {
			t.Errorf("got %q, want %q", b.String(), c.want)
		}
	}
}

// TestVersionCommand: the built binary names itself and the Go that built it.
func TestVersionCommand(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.HasPrefix(s, "goverbs ") || !strings.HasSuffix(s, " "+runtime.Version()+"\n") {
		t.Errorf("goverbs version printed %q", s)
	}
}
