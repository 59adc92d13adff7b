package shm

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSweepStale: the sweep removes the old socket files nobody listens on, and only
// those: a live listener's file, a file too young to judge, a file of another prefix
// and a file that is not a socket stay.
func TestSweepStale(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rv")
	if err := EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	sock := func(name string, live, aged bool) string {
		path := filepath.Join(dir, name)
		l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		if live {
			t.Cleanup(func() { l.Close() })
		} else {
			l.SetUnlinkOnClose(false)
			l.Close()
		}
		if aged {
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	stale := sock("shm-1-127.0.0.9:4791.sock", false, true)
	stale2 := sock("shm-1-127.0.0.10:4791.sock", false, true)
	live := sock("shm-1-127.0.0.11:4791.sock", true, true)
	young := sock("shm-1-127.0.0.12:4791.sock", false, false)
	other := sock("127.0.0.9.sock", false, true)
	plain := filepath.Join(dir, "shm-1-127.0.0.13:4791.sock")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(plain, old, old)

	if n := SweepStale(dir, "shm-", time.Minute); n != 2 {
		t.Errorf("removed %d files, want 2", n)
	}
	for _, p := range []string{stale, stale2} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s: stale and old, still there (%v)", filepath.Base(p), err)
		}
	}
	for _, p := range []string{live, young, other, plain} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: removed (%v)", filepath.Base(p), err)
		}
	}
	// The live listener still accepts.
	c, err := Dial(live, time.Second)
	if err != nil {
		t.Fatalf("the live listener after the sweep: %v", err)
	}
	c.Close()
}
