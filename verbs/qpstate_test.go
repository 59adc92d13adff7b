package verbs_test

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func TestModifyChecksTransitions(t *testing.T) {
	a := newHost(t)
	qp := a.QP(t, verbs.QPTypeRC)
	// RESET -> RTR skips INIT.
	err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState)
	if !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET->RTR: %v", err)
	}
	// RESET -> INIT without ACCESS_FLAGS.
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex)
	if !errors.Is(err, verbs.ErrMissingAttr) {
		t.Fatalf("INIT without access flags: %v", err)
	}
	// RESET -> INIT with a Q_Key, which RC does not take.
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags|verbs.QPAttrQKey)
	if !errors.Is(err, verbs.ErrExtraAttr) {
		t.Fatalf("INIT with a Q_Key: %v", err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort|verbs.QPAttrPKeyIndex|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	// INIT -> RTR without the RC-required MIN_RNR_TIMER.
	err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: verbs.AHAttr{DGID: a.GID}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic)
	if !errors.Is(err, verbs.ErrMissingAttr) {
		t.Fatalf("RTR without MIN_RNR_TIMER: %v", err)
	}
	if qp.State() != verbs.QPStateInit {
		t.Fatalf("refused modify changed the state to %v", qp.State())
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
}
