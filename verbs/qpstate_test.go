package verbs

import (
	"errors"
	"testing"
)

func TestModifyChecksTransitions(t *testing.T) {
	a := newHost(t)
	qp := a.qp(t, QPTypeRC)
	// RESET -> RTR skips INIT.
	err := qp.Modify(&QPAttr{State: QPStateRTR}, QPAttrState)
	if !errors.Is(err, ErrInvalidState) {
		t.Fatalf("RESET->RTR: %v", err)
	}
	// RESET -> INIT without ACCESS_FLAGS.
	err = qp.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex)
	if !errors.Is(err, ErrMissingAttr) {
		t.Fatalf("INIT without access flags: %v", err)
	}
	// RESET -> INIT with a Q_Key, which RC does not take.
	err = qp.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags|QPAttrQKey)
	if !errors.Is(err, ErrExtraAttr) {
		t.Fatalf("INIT with a Q_Key: %v", err)
	}
	if err := qp.Modify(&QPAttr{State: QPStateInit, Port: 1}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	// INIT -> RTR without the RC-required MIN_RNR_TIMER.
	err = qp.Modify(&QPAttr{State: QPStateRTR, PathMTU: MTU1024, AH: AHAttr{DGID: a.gid}},
		QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic)
	if !errors.Is(err, ErrMissingAttr) {
		t.Fatalf("RTR without MIN_RNR_TIMER: %v", err)
	}
	if qp.State() != QPStateInit {
		t.Fatalf("refused modify changed the state to %v", qp.State())
	}
	if err := qp.Modify(&QPAttr{State: QPStateErr}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&QPAttr{State: QPStateReset}, QPAttrState); err != nil {
		t.Fatal(err)
	}
}
