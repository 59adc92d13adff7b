package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/verbstest"
)

// softEnv opens software devices on loopback addresses no other test holds.
var softEnv = verbstest.Env{Open: func(t testing.TB) *verbs.Device {
	return testaddr.Open(t, testaddr.Verbs, func(a netip.Addr) (*verbs.Device, error) {
		return verbs.OpenSoft(verbs.SoftConfig{Addr: a})
	})
}}

func TestLifecycle(t *testing.T) { verbstest.TestLifecycle(t, softEnv) }

func TestCloseBusy(t *testing.T) { verbstest.TestCloseBusy(t, softEnv) }
