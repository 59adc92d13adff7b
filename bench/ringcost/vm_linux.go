package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// vm moves len(local) bytes between local and remote, remote in process pid's memory:
// process_vm_writev (write) or process_vm_readv.
func vm(write bool, pid int, local, remote []byte) error {
	l := []unix.Iovec{{Base: &local[0]}}
	l[0].SetLen(len(local))
	r := []unix.RemoteIovec{{Base: uintptrOf(remote), Len: len(remote)}}
	var n int
	var err error
	name := "process_vm_readv"
	if write {
		name = "process_vm_writev"
		n, err = unix.ProcessVMWritev(pid, l, r, 0)
	} else {
		n, err = unix.ProcessVMReadv(pid, l, r, 0)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	if n != len(local) {
		return fmt.Errorf("%s moved %d bytes of %d", name, n, len(local))
	}
	return nil
}
