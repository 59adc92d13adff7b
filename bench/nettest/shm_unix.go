//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shm_lat: the machine's floor under any shared-memory transport between two processes.
// Two slots in a file both processes map, one per direction, each a sequence word and
// SIZE bytes; a side copies its message into its slot and then stores the sequence
// number, and the other spins on that word, copies the bytes out and answers the same
// way. No ring, no header, no check: what a Go programmer writes to hand 8 bytes to
// another process and back, as ../shared/baseline's shm-ping does (where the figure the
// same-host issue quotes, 160 ns a round trip, came from). What it costs is two cache
// lines crossing between the cores each way; goverbs' same-host rings move the same
// lines and do an RDMA engine's work around them (bench/samehost.sh puts the two side by
// side, measured in the same round).

// shmSlot is one direction's slot: the sequence word on a line of its own, the bytes
// after it, and the two slots far enough apart that neither side's stores touch the
// other's lines (nor an adjacent-line prefetch pair).
const shmSlot = 256

// shmPath is the file the server creates and the client maps, named after --bind and the
// port as unix_lat's socket is: in /dev/shm where there is one (memory, never written
// back to a disk), else the temporary directory.
func shmPath(o options) string {
	dir := "/dev/shm"
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = os.TempDir()
	}
	return filepath.Join(dir, fmt.Sprintf("nettest-%s-%d.shm", o.serverAddr(), o.port))
}

// shmBye is the request sequence number with which the client says it is done.
const shmBye = ^uint64(0)

func shmLat(o options) error {
	if o.size > shmSlot-8 {
		return fmt.Errorf("-s %d: shm_lat carries at most %d bytes", o.size, shmSlot-8)
	}
	path := shmPath(o)
	var mem []byte
	var err error
	if o.serving() {
		mem, err = shmCreate(path)
	} else {
		mem, err = shmOpen(path)
	}
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	// Safe: the words are at offsets 0 and shmSlot of a page-aligned mapping of
	// 2*shmSlot bytes, so 8-aligned and inside it; the mapping outlives their use.
	reqSeq := (*atomic.Uint64)(unsafe.Pointer(&mem[0]))
	respSeq := (*atomic.Uint64)(unsafe.Pointer(&mem[shmSlot]))
	req, resp := mem[8:8+o.size], mem[shmSlot+8:shmSlot+8+o.size]
	deadline := runDeadline(o)
	if o.serving() {
		defer os.Remove(path)
		buf := make([]byte, o.size)
		for want := uint64(1); ; want++ {
			seq, err := spinFor(reqSeq, want, time.Time{})
			if err != nil || seq == shmBye {
				return err
			}
			copy(buf, req)
			copy(resp, buf)
			respSeq.Store(seq)
		}
	}
	msg, in := make([]byte, o.size), make([]byte, o.size)
	defer reqSeq.Store(shmBye)
	return reportLatency(o, func(i int) error {
		msg[0] = byte(i)
		copy(req, msg)
		reqSeq.Store(uint64(i) + 1)
		if _, err := spinFor(respSeq, uint64(i)+1, deadline); err != nil {
			return err
		}
		copy(in, resp)
		if in[0] != msg[0] {
			return fmt.Errorf("turn %d: the answer carries byte %#x, not %#x", i, in[0], msg[0])
		}
		return nil
	})
}

// spinFor spins until w holds want (or, for a server, the client's goodbye), checking
// the deadline (zero: none) only every million empty looks.
func spinFor(w *atomic.Uint64, want uint64, deadline time.Time) (uint64, error) {
	for spins := 1; ; spins++ {
		if v := w.Load(); v == want || v == shmBye {
			return v, nil
		}
		if spins&(1<<20-1) == 0 && !deadline.IsZero() && time.Now().After(deadline) {
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// shmCreate makes the server's file, zeroed, under a temporary name renamed into place
// only once it has its size, so that a client never maps a short file.
func shmCreate(path string) ([]byte, error) {
	tmp := path + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(2 * shmSlot); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 2*shmSlot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		unix.Munmap(mem)
		os.Remove(tmp)
		return nil, err
	}
	return mem, nil
}

// shmOpen maps the server's file, retrying for a few seconds while the server starts.
func shmOpen(path string) ([]byte, error) {
	var f *os.File
	var err error
	for range 50 {
		if f, err = os.OpenFile(path, os.O_RDWR, 0); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() < 2*shmSlot {
		return nil, fmt.Errorf("%s: not a shm_lat server's file", path)
	}
	return unix.Mmap(int(f.Fd()), 0, 2*shmSlot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}
