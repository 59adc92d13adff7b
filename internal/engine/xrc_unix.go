//go:build unix

package engine

import (
	"fmt"
	"syscall"
)

const (
	oCreat = syscall.O_CREAT
	oExcl  = syscall.O_EXCL
)

// The kernel's answers (ib_uverbs_open_xrcd), which programs test for: a file with a
// domain opened with O_EXCL is EINVAL, one without and no O_CREAT is EAGAIN.
var (
	errExist    error = syscall.EINVAL
	errNotExist error = syscall.EAGAIN
)

// xrcdFileKey identifies the file fd refers to: its device and inode, as the kernel's
// ibv_open_xrcd compares them.
func xrcdFileKey(fd int) (xrcdKey, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return xrcdKey{}, fmt.Errorf("verbs: XRC domain file: %w", err)
	}
	return xrcdKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}
