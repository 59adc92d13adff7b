//go:build !unix

package engine

import (
	"errors"
	"io/fs"
	"os"
)

const (
	oCreat = os.O_CREATE
	oExcl  = os.O_EXCL
)

var (
	errExist    = fs.ErrExist
	errNotExist = fs.ErrNotExist
)

// xrcdFileKey: without fstat's inode, domains cannot be shared through a file here; a
// private domain (fd -1) still works.
func xrcdFileKey(int) (xrcdKey, error) {
	return xrcdKey{}, errors.ErrUnsupported
}
