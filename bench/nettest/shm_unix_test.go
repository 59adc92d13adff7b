//go:build unix

package main

import (
	"net/netip"
	"os"
	"testing"
	"time"
)

// TestShmLatRoundTrips: a client's turns each come back through the server's slot with
// the byte it sent (the client checks), the server ends at the client's goodbye, and
// the file it made is gone after.
func TestShmLatRoundTrips(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	srv := options{size: 8, iters: 1, dur: time.Second, bind: lo, port: 20000 + os.Getpid()%40000}
	cli := srv
	cli.iters, cli.server = 2000, lo
	done := make(chan error, 1)
	go func() { done <- shmLat(srv) }()
	if err := shmLat(cli); err != nil {
		t.Fatalf("client: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("server: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not end at the client's goodbye")
	}
	if _, err := os.Stat(shmPath(srv)); !os.IsNotExist(err) {
		t.Fatalf("the server's file is still there: %v", err)
	}
}

// TestShmLatRefusesAShortFile: a client that finds a file too small for the two slots
// says so rather than touching memory past its end.
func TestShmLatRefusesAShortFile(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	o := options{size: 8, iters: 1, dur: time.Second, bind: lo, server: lo, port: 20000 + (os.Getpid()+1)%40000}
	path := shmPath(o)
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	if err := shmLat(o); err == nil {
		t.Fatal("a 5-byte file was mapped as a server's slots")
	}
}
