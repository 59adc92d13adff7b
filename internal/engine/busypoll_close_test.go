package engine_test

import (
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

// TestBusyPollOwedAckLeavesBeforeTheQPGoes: a busy-poll device defers the ACK a poll
// earns (it leaves with the QP's next requests or a later poll). An application that
// takes its last receive completion and then destroys the QP, resets it or closes the
// device must not take that ACK with it: on an RNIC it left when the SEND arrived. The
// peer's SEND must complete with success, not with retry-exceeded once its timer gives
// up (rc_pingpong --busy-poll as the client: the server failed with wr_id 2, 6 of 6).
func TestBusyPollOwedAckLeavesBeforeTheQPGoes(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, b *host, qb *verbs.QP)
	}{
		{"QP.Close", func(t *testing.T, b *host, qb *verbs.QP) { noErr(t, qb.Close()) }},
		{"Device.Close", func(t *testing.T, b *host, qb *verbs.QP) { noErr(t, b.Dev.Close()) }},
		{"Modify RESET", func(t *testing.T, b *host, qb *verbs.QP) {
			noErr(t, qb.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newHost(t)
			b := newHostCfg(t, verbs.SoftConfig{BusyPoll: true})
			params := defaultRC()
			params.Timeout, params.Retry = 14, 1 // 67 ms, one retry: a lost ACK fails in ~0.3 s
			p := newPair(t, a, b, verbs.QPTypeRC, params)
			src, dst := a.MR(t, 64, allAccess), b.MR(t, 64, allAccess)
			noErr(t, p.QB.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{dst.SGE(0, 64)}}))
			noErr(t, p.QA.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.SGE(0, 64)}}))
			expectStatus(t, b.RCQ, 1, verbs.WCSuccess) // b's poll takes the SEND and owes its ACK
			tc.end(t, b, p.QB)                         // at once, as rc_pingpong's last iteration does
			expectStatus(t, a.CQ, 2, verbs.WCSuccess)
		})
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
