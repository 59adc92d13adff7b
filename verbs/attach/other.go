//go:build !linux

package attach

import (
	"errors"
	"fmt"

	"github.com/goverbs/goverbs/verbs/driver"
	"github.com/goverbs/goverbs/verbs/soft"
)

func open(cfg soft.Config) (driver.Device, error) {
	return nil, fmt.Errorf("%w: %s: attaching to goverbs serve needs Linux (memfd, SCM_RIGHTS, eventfd): %w",
		driver.ErrUnavailable, cfg.Name, errors.ErrUnsupported)
}

// EnvOwnEngine: see the Linux version (own_linux.go).
const EnvOwnEngine = "GOVERBS_ATTACH_ENGINE"

// OwnEngine is false: attaching needs Linux.
func OwnEngine(c driver.Commander) bool { return false }

// SetOwnEngineDefault does nothing: attaching needs Linux.
func SetOwnEngineDefault(on bool) {}
