package shm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Region is a shared mapping of a memfd.
type Region struct {
	f   *os.File
	mem []byte
}

// Create makes a memfd of size bytes (rounded up to a page), sealed so that nobody
// can shrink or grow it, and maps it. Its File is what to pass to the peer.
func Create(name string, size int) (*Region, error) {
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: ftruncate: %w", err)
	}
	// The peer maps what we send it only when it cannot be shrunk under it (Map).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: seal: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	r, err := mapFile(f, size)
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// Map maps a region a peer sent, after checking that its size lies within
// [minSize, maxSize] and that it is sealed against shrinking: a peer that could
// truncate it would turn our next access into SIGBUS. Map owns f from now on (it is
// closed on failure).
func Map(f *os.File, minSize, maxSize int) (*Region, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("shm: fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < int64(minSize) || st.Size > int64(maxSize) {
		f.Close()
		return nil, fmt.Errorf("%w: region of %d bytes, want %d..%d", ErrLayout, st.Size, minSize, maxSize)
	}
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		f.Close()
		return nil, errors.New("shm: region not sealed against shrinking")
	}
	r, err := mapFile(f, int(st.Size))
	if err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

func mapFile(f *os.File, size int) (*Region, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap: %w", err)
	}
	return &Region{f: f, mem: mem}, nil
}

// Bytes is the mapping.
func (r *Region) Bytes() []byte { return r.mem }

// File is the memfd, to send to a peer (SendFDs).
func (r *Region) File() *os.File { return r.f }

// Close unmaps the region and closes the memfd. Nothing may use Bytes afterwards:
// callers stop every ring user first.
func (r *Region) Close() error {
	var err error
	if r.mem != nil {
		err = unix.Munmap(r.mem)
		r.mem = nil
	}
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	return err
}
