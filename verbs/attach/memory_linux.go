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
// Only a buffer that is whole pages can be moved: between the copy and the mapping, a
// write by another goroutine to the same pages would be lost, and Go puts other objects
// (and new allocations) beside a buffer that does not fill its pages. A buffer that
// starts on a page and is a whole number of pages has its pages to itself (verbs.Mmap's
// memory; Go allocations of whole pages); any other is refused, unless it lies inside
// pages a live registration already moved, which are shared as they are.
//
// When the last registration of the pages closes they move back onto private anonymous
// memory (unshare). They must: Go's heap takes memory it has returned to the kernel
// (madvise MADV_DONTNEED) to read as zeros when it is used again, and MADV_DONTNEED on a
// shared file mapping leaves the file's bytes in place, so a freed buffer's pages that
// stayed on the memfd came back to the allocator holding old bytes it took for zeroed
// memory ("found bad pointer in Go heap"). For the same reason the span holds the buffer
// itself: the garbage collector cannot free memory that is still on a memfd, even when a
// program drops an MR without closing it.

type sharedSpan struct {
	start, end uintptr
	buf        []byte // the buffer whose pages these are, kept alive while they are shared
	reg        *shm.Region
	live       int // registrations using it; the span leaves the table at 0
}

var shared struct {
	mu    sync.Mutex
	spans []*sharedSpan
}

var errNotPages = driver.NewError(driver.ErrInvalidAttr,
	"attach: an attached device registers whole pages: the buffer must start on a page and be a whole number of pages (verbs.Mmap, or make a multiple of the page size)")

// share returns the span that holds buf and buf's offset in its memfd.
func share(buf []byte) (*sharedSpan, uint64, error) {
	page := uintptr(os.Getpagesize())
	a := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	start, end := a&^(page-1), (a+uintptr(len(buf))+page-1)&^(page-1)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for _, s := range shared.spans {
		if start >= s.start && end <= s.end {
			s.live++
			return s, uint64(a - s.start), nil
		}
		if start < s.end && end > s.start {
			return nil, 0, driver.NewError(driver.ErrInvalidAttr, fmt.Sprintf(
				"attach: region [%#x, %#x) straddles the pages of a registered region", a, a+uintptr(len(buf))))
		}
	}
	if a != start || uintptr(len(buf))%page != 0 {
		return nil, 0, errNotPages
	}
	size := end - start
	reg, err := shm.Create("goverbs-mr", int(size))
	if err != nil {
		return nil, 0, driver.NewError(driver.ErrLimit, err.Error())
	}
	// The pages are copied and remapped by address, through the kernel (pwrite(2) from
	// them, mmap(2) over them), which needs no Go pointer arithmetic; they are buf's own
	// (checked above), read once here, then replaced by a mapping of the same size at
	// the same address with the same bytes, so every pointer into them stays valid.
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
	sp := &sharedSpan{start: start, end: end, buf: buf, reg: reg, live: 1}
	shared.spans = append(shared.spans, sp)
	return sp, 0, nil
}

// unshare drops a registration's hold on its span. The last one takes the span out of
// the table and moves its pages back onto private anonymous memory with the bytes they
// hold: a new anonymous mapping is filled from the memfd (pread(2), which reads the
// pages' current bytes) and mremap(2)ed over the span in one step, so the program's
// pointers stay valid and no instant exists where the pages are unmapped. As when they
// moved, a write by another goroutine to the buffer during the move would be lost; a
// program does not write a buffer while it deregisters it.
func unshare(s *sharedSpan) error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s.live--; s.live > 0 {
		return nil
	}
	for i, x := range shared.spans {
		if x == s {
			shared.spans = append(shared.spans[:i], shared.spans[i+1:]...)
			break
		}
	}
	defer s.reg.Close()
	size := s.end - s.start
	tmp, _, errno := unix.Syscall6(unix.SYS_MMAP, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uintptr(0), 0)
	if errno != 0 {
		return fmt.Errorf("attach: move the region's pages back: map: %v", errno)
	}
	fd := s.reg.File().Fd()
	for off := uintptr(0); off < size; {
		n, _, errno := unix.Syscall6(unix.SYS_PREAD64, fd, tmp+off, size-off, off, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || n == 0 {
			unix.Syscall(unix.SYS_MUNMAP, tmp, size, 0)
			return fmt.Errorf("attach: move the region's pages back: copy: %v", errno)
		}
		off += n
	}
	got, _, errno := unix.Syscall6(unix.SYS_MREMAP, tmp, size, size,
		unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, s.start, 0)
	if errno != 0 || got != s.start {
		unix.Syscall(unix.SYS_MUNMAP, tmp, size, 0)
		return fmt.Errorf("attach: move the region's pages back: remap: %v", errno)
	}
	s.buf = nil
	return nil
}
