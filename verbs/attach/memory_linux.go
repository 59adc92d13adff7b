package attach

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Registered memory is shared with the daemon by moving the buffer's pages onto a
// memfd in place: the pages' contents are copied into a new memfd, which is then mapped
// over the same addresses (MAP_FIXED). The program's slice is unchanged, at the same
// address, and from then on its bytes are the memfd's, which the daemon maps too: the
// engine reads and writes them directly, with no copy and no syscall per access, and
// the daemon can reach only what was registered. (Cross-memory attach,
// process_vm_readv/writev, was the alternative: it costs a syscall per access, needs
// ptrace permission, and would need the engine to address memory it has not mapped.)
//
// The move is per page, so it takes whatever else shares the buffer's first and last
// pages along; the pages stay moved after the MR is closed (moving them back would
// race with the program as moving them did), and a later registration within them
// reuses the memfd. A write by another goroutine to those pages between the copy and
// the mapping would be lost: register page-aligned memory (verbs.Mmap, or Go
// allocations of 32 KiB and more, which have pages of their own) when other goroutines
// write next to the buffer.

type sharedSpan struct {
	start, end uintptr
	reg        *shm.Region
	live       int // registrations using it
}

var shared struct {
	mu    sync.Mutex
	spans []*sharedSpan
}

// share returns the memfd that holds buf and buf's offset in it, moving buf's pages
// onto a new memfd first if they are not shared yet. Pages shared earlier and no
// longer registered are taken into the new memfd when buf straddles them (Go reuses
// freed memory); ones still registered cannot be, since the daemon's view of them
// would part from ours. unshare undoes the registration's hold.
func share(buf []byte) (*sharedSpan, uint64, error) {
	page := uintptr(os.Getpagesize())
	a := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	start, end := a&^(page-1), (a+uintptr(len(buf))+page-1)&^(page-1)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	keep := shared.spans[:0:0]
	for _, s := range shared.spans {
		if start >= s.start && end <= s.end {
			s.live++
			return s, uint64(a - s.start), nil
		}
		if start < s.end && end > s.start {
			if s.live > 0 {
				return nil, 0, driver.NewError(driver.ErrInvalidAttr, fmt.Sprintf(
					"attach: region [%#x, %#x) straddles pages of a registered region; register page-aligned buffers", a, a+uintptr(len(buf))))
			}
			start, end = min(start, s.start), max(end, s.end)
			continue
		}
		keep = append(keep, s)
	}
	size := end - start
	reg, err := shm.Create("goverbs-mr", int(size))
	if err != nil {
		return nil, 0, driver.NewError(driver.ErrLimit, err.Error())
	}
	// The pages are copied and remapped by address, through the kernel (pwrite(2) from
	// them, mmap(2) over them): they hold memory outside buf, which Go code may not
	// reach through buf's pointer. The run is read once, then replaced by a mapping of
	// the same size at the same address with the same bytes, so every pointer into it
	// stays valid.
	fd := reg.File().Fd()
	for off := uintptr(0); off < size; {
		n, _, errno := unix.Syscall6(unix.SYS_PWRITE64, fd, start+off, size-off, off, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || n == 0 {
			reg.Close()
			return nil, 0, driver.NewError(driver.ErrLimit, fmt.Sprintf("attach: copy the region's pages: %v", errno))
		}
		off += n
	}
	got, _, errno := unix.Syscall6(unix.SYS_MMAP, start, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_FIXED, fd, 0)
	if errno != 0 || got != start {
		reg.Close()
		return nil, 0, driver.NewError(driver.ErrLimit, fmt.Sprintf("attach: map the region's pages shared: %v", errno))
	}
	for _, s := range shared.spans {
		if s.start >= start && s.end <= end && s.live == 0 {
			s.reg.Close() // its pages at our addresses are the new memfd's now
		}
	}
	sp := &sharedSpan{start: start, end: end, reg: reg, live: 1}
	shared.spans = append(keep, sp)
	return sp, uint64(a - start), nil
}

func unshare(s *sharedSpan) {
	shared.mu.Lock()
	s.live--
	shared.mu.Unlock()
}
