// Package netnstest is test help for tests that make network namespaces (root only): it
// runs code inside one. The tests that use it make their namespaces with ip(8) and
// delete them in t.Cleanup (netio/afxdp, internal/engine's veth tests).
package netnstest

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// In runs f on an OS thread of its own that has entered the named namespace ns
// (/run/netns/ns, as `ip netns add` makes it), so that every socket, link and netlink
// socket f makes belongs to ns; the thread leaves ns after f (or dies with its goroutine
// if it cannot). What f makes keeps its namespace when used from other goroutines later.
func In(t testing.TB, ns string, f func()) {
	t.Helper()
	var ferr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ferr = err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ferr = err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			ferr = fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		f()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // else the thread ends with this goroutine
		}
	}()
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
}
