package engine_test

import (
	"net/netip"
	"testing"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/softtest"
	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
)

// The protocol tests build their machines with internal/softtest, on this package's
// address block (testaddr.Engine); these names keep the tests short.

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
	waitWCFunc   = softtest.WaitWCFunc
	expectStatus = softtest.ExpectStatus
	waitState    = softtest.WaitState
	fill         = softtest.Fill
)

func newHost(t testing.TB) *host {
	t.Helper()
	return softtest.NewHost(t, testaddr.Engine)
}

func newHostCfg(t testing.TB, cfg verbs.SoftConfig) *host {
	t.Helper()
	return softtest.NewHostCfg(t, testaddr.Engine, cfg)
}

// newHostAt opens a host on addr, for the tests that need a particular address (an IPv6
// address they added to lo).
func newHostAt(t testing.TB, addr string) *host {
	t.Helper()
	return newHostCfg(t, verbs.SoftConfig{Addr: netip.MustParseAddr(addr)})
}

// debugA and debugB describe the transport state of p's QPs (engine.DebugQP).
func debugA(p *pair) string { return engine.DebugQP(p.A.GID, p.QA.QPN()) }
func debugB(p *pair) string { return engine.DebugQP(p.B.GID, p.QB.QPN()) }
