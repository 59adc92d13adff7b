package verbs_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// The tests build their machines with internal/softtest, on this package's address
// block (testaddr.Verbs); these names keep the tests short.

type (
	host     = softtest.Host
	pair     = softtest.Pair
	rcParams = softtest.RCParams
)

const allAccess = softtest.AllAccess

var (
	defaultRC    = softtest.DefaultRC
	connect      = softtest.Connect
	newPair      = softtest.NewPair
	udQP         = softtest.UDQP
	waitWC       = softtest.WaitWC
	expectStatus = softtest.ExpectStatus
	fill         = softtest.Fill
)

func newHost(t testing.TB) *host {
	t.Helper()
	return softtest.NewHost(t, testaddr.Verbs)
}

func newHostCfg(t testing.TB, cfg verbs.SoftConfig) *host {
	t.Helper()
	return softtest.NewHostCfg(t, testaddr.Verbs, cfg)
}
