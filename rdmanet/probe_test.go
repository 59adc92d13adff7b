package rdmanet

import (
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// A writer held back by credits, with every byte it sent acknowledged, still learns
// that its peer is gone: its probes go unanswered and the Write fails, where it
// would otherwise wait for a credit that never comes.
func TestWriteToAGonePeerFails(t *testing.T) {
	a, b := pair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write(make([]byte, 2*ringSize)) // b reads nothing: a stops at one ring
		errc <- err
	}()
	waitUntil(t, 10*time.Second, "the writer to fill the peer's ring", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.sent == ringSize && a.completed == ringSize
	})
	// b goes silent, as a killed process does: a QP in the error state answers nothing
	// (IBTA 10.3.1).
	if err := b.ep.qp.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	// testPair's QPs time out after 67 ms, 8 tries: the first probe's retries run out
	// about 2 s after the wait began.
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "retry") {
			t.Fatalf("Write to a gone peer: %v, want the transport's retry error", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Write to a gone peer still blocked after 15 s")
	}
	if _, err := a.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "EOF") {
		t.Errorf("Read after the peer was found gone: %v, want the connection's error", err)
	}
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
	}
}
