//go:build linux

package afxdp

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// The network namespace a Conn belongs to. Everything Open makes (the AF_XDP socket, the
// BPF link, the netlink and local-path sockets) is made in the calling thread's network
// namespace and stays there whatever thread uses it later. What a Conn makes later (a
// multicast group's socket) must be made there too, and a Go program may call from a
// thread in another namespace (one that entered a namespace on a locked thread to open
// the Conn, as the tests do): the namespace is kept open and entered again when the
// calling thread is elsewhere.

// openNetns opens the calling thread's network namespace.
func openNetns() (int, error) {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("afxdp: open the network namespace: %w", err)
	}
	return fd, nil
}

// sameNetns reports whether the calling thread is in the namespace ns (an open
// namespace file): the two files name the same inode of nsfs.
func sameNetns(ns int) bool {
	var a, b unix.Stat_t
	if unix.Fstat(ns, &a) != nil || unix.Stat("/proc/thread-self/ns/net", &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// inNetns runs f in the network namespace ns: on the calling thread when it is there
// already, else on a locked thread of its own that enters ns for f (setns needs
// CAP_SYS_ADMIN) and leaves it after, or dies with its goroutine if it cannot leave.
func inNetns(ns int, f func() error) error {
	runtime.LockOSThread()
	same := sameNetns(ns)
	runtime.UnlockOSThread()
	if same {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("afxdp: open the network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("afxdp: enter the Conn's network namespace: %w", err)
			return
		}
		err = f()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
