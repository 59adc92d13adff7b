package verbs

import (
	"errors"
	"fmt"
	"net/netip"
)

// openError is a software device that could not be opened. Its text names the device and
// the socket error at the root of the chain; errors.Is still sees the whole chain.
type openError struct {
	name string
	addr netip.AddrPort
	err  error
}

func (e *openError) Error() string {
	root := e.err
	for {
		next := errors.Unwrap(root)
		if next == nil {
			break
		}
		root = next
	}
	return fmt.Sprintf("verbs: open %s on %v: %v", e.name, e.addr, root)
}

func (e *openError) Unwrap() []error { return []error{ErrUnavailable, e.err} }
