//go:build unix

package verbs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Mmap allocates size bytes of anonymous memory outside the Go heap, for memory regions
// the caller owns (the equivalent of registering mmap'd or huge-page memory with
// ibv_reg_mr). With hugePages the mapping uses MAP_HUGETLB, which needs huge pages
// reserved in /proc/sys/vm/nr_hugepages; size is then rounded up to the huge page size
// by the kernel (Linux only; elsewhere hugePages is an error). Release it with Munmap
// after the MR is closed.
func Mmap(size int, hugePages bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANON | mapPopulate
	if hugePages {
		if mapHugeTLB == 0 {
			return nil, fmt.Errorf("%w: mmap with huge pages: %w", ErrInvalidAttr, errors.ErrUnsupported)
		}
		flags |= mapHugeTLB
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap %d bytes (huge pages %v): %w", ErrLimit, size, hugePages, err)
	}
	return b, nil
}

// Munmap releases memory from Mmap.
func Munmap(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("%w: munmap: %w", ErrInvalidAttr, err)
	}
	return nil
}
