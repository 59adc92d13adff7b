package shm

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dir is where goverbs' unix sockets live: $XDG_RUNTIME_DIR/goverbs, or
// $TMPDIR/goverbs-UID without it. The same-host rendezvous sockets and `goverbs stat`'s
// control sockets both live there.
func Dir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "goverbs")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("goverbs-%d", os.Getuid()))
}
