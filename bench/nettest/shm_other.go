//go:build !unix

package main

import "errors"

// shmLat needs a file two processes can map (shm_unix.go).
func shmLat(options) error { return errors.New("shm_lat needs mmap(2): Unix only") }
