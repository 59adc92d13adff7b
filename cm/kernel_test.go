package cm

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/cm/mad"
	"github.com/goverbs/goverbs/verbs"
)

// TestKernelEventErrors: each rdma_cm event that ends a handshake becomes the error
// the software CM gives for the same outcome.
func TestKernelEventErrors(t *testing.T) {
	long := bytes.Repeat([]byte{0xaa}, 255) // private_data_len's most
	for _, tc := range []struct {
		e      kevent
		is     error // nil: no error
		reason mad.Reason
	}{
		{e: kevent{kind: evRejected, status: 28, priv: []byte("no")}, is: ErrRejected, reason: mad.ReasonConsumerReject},
		{e: kevent{kind: evRejected, status: 8}, is: ErrRejected, reason: 8},
		{e: kevent{kind: evRejected, status: 28, priv: long}, is: ErrRejected, reason: mad.ReasonConsumerReject},
		{e: kevent{kind: evRejected, status: -int(syscall.ECONNREFUSED)}, is: syscall.ECONNREFUSED},
		{e: kevent{kind: evRejected, status: 0x10000}, is: ErrRejected},
		{e: kevent{kind: evUnreachable, status: -int(syscall.ETIMEDOUT)}, is: ErrTimeout},
		{e: kevent{kind: evUnreachable}, is: ErrTimeout},
		{e: kevent{kind: evUnreachable, status: -int(syscall.EHOSTUNREACH)}, is: syscall.EHOSTUNREACH},
		{e: kevent{kind: evAddrError, status: -int(syscall.ENODEV)}, is: syscall.ENODEV},
		{e: kevent{kind: evRouteError, status: -int(syscall.ETIMEDOUT)}, is: syscall.ETIMEDOUT},
		{e: kevent{kind: evAddrError, status: -int(syscall.ETIMEDOUT)}, is: ErrTimeout},
		{e: kevent{kind: evRouteError, status: -int(syscall.EHOSTUNREACH)}, is: syscall.EHOSTUNREACH},
		{e: kevent{kind: evConnectError, status: -int(syscall.EINVAL)}, is: syscall.EINVAL},
		{e: kevent{kind: evConnectError}},
		{e: kevent{kind: evDisconnected}, is: ErrDisconnected},
		{e: kevent{kind: evDeviceRemoval}, is: ErrClosed},
		{e: kevent{kind: evAddrResolved}},
		{e: kevent{kind: evTimewaitExit}},
		{e: kevent{kind: cmEvent(99)}},
	} {
		err := tc.e.err()
		if tc.e.kind == evConnectError {
			if err == nil {
				t.Errorf("%v: no error", tc.e.kind)
			}
			continue
		}
		if tc.is == nil {
			if err != nil {
				t.Errorf("%v: %v, want none", tc.e.kind, err)
			}
			continue
		}
		if !errors.Is(err, tc.is) {
			t.Errorf("%v status %d: %v, want %v", tc.e.kind, tc.e.status, err, tc.is)
		}
		var rej *RejectError
		if errors.As(err, &rej) {
			if rej.Reason != tc.reason || len(rej.PrivateData) != mad.RejectPrivateLen ||
				!bytes.HasPrefix(tc.e.priv, rej.PrivateData[:min(len(tc.e.priv), mad.RejectPrivateLen)]) {
				t.Errorf("%v: %+v", tc.e.kind, rej)
			}
		}
	}
}

// TestFitPrivateData: private data from the network, of any length, becomes the
// field's length, zero-padded or cut, never aliasing the input.
func TestFitPrivateData(t *testing.T) {
	for _, in := range [][]byte{nil, {}, []byte("abc"), bytes.Repeat([]byte{1}, 56), bytes.Repeat([]byte{2}, 255)} {
		for _, n := range []int{mad.ConnectPrivateLen, mad.REPPrivateLen, mad.RejectPrivateLen} {
			out := fit(in, n)
			if len(out) != n {
				t.Fatalf("fit(%d bytes, %d) is %d long", len(in), n, len(out))
			}
			k := min(len(in), n)
			if !bytes.Equal(out[:k], in[:k]) || !bytes.Equal(out[k:], make([]byte, n-k)) {
				t.Fatalf("fit(%d bytes, %d) = %x", len(in), n, out)
			}
			if len(in) > 0 {
				out[0] ^= 0xff
				if out[0] == in[0] {
					t.Fatal("fit aliases its input")
				}
			}
		}
	}
}

func TestCMEventString(t *testing.T) {
	for e, want := range map[cmEvent]string{evAddrResolved: "RDMA_CM_EVENT_ADDR_RESOLVED",
		evConnectResponse: "RDMA_CM_EVENT_CONNECT_RESPONSE", evTimewaitExit: "RDMA_CM_EVENT_TIMEWAIT_EXIT",
		cmEvent(-1): "RDMA_CM_EVENT_UNKNOWN(-1)", cmEvent(16): "RDMA_CM_EVENT_UNKNOWN(16)"} {
		if got := e.String(); got != want {
			t.Errorf("%d: %q, want %q", int(e), got, want)
		}
	}
}

// TestAgentAHAttr: on a software device the agent's address vector uses GID 0, the
// device's only one.
func TestAgentAHAttr(t *testing.T) {
	s, peer := pair(t, nil)
	a := s.a.AHAttr(peer.a.Addr())
	if a.DGID != verbs.GIDFromAddr(peer.a.Addr()) || a.SGIDIndex != 0 || a.Port != 1 || a.HopLimit != 64 {
		t.Fatalf("AHAttr %+v", a)
	}
	ah, err := s.pd.CreateAH(a)
	if err != nil {
		t.Fatal(err)
	}
	ah.Close()
}

// FuzzKernelEventErr: whatever an event says (type, status, private data of any
// length), its meaning is computed without a panic, and a refusal's private data is
// the REJ's field, zero-padded or cut.
func FuzzKernelEventErr(f *testing.F) {
	f.Add(int(evRejected), 28, []byte("go away"))
	f.Add(int(evRejected), -111, []byte(nil))
	f.Add(int(evUnreachable), -110, bytes.Repeat([]byte{1}, 255))
	f.Add(int(evConnectError), 0, []byte{})
	f.Add(-1, 1<<30, []byte{0})
	f.Fuzz(func(t *testing.T, kind, status int, priv []byte) {
		e := kevent{kind: cmEvent(kind), status: status, priv: priv}
		err := e.err()
		_ = e.kind.String()
		var rej *RejectError
		if errors.As(err, &rej) && (len(rej.PrivateData) != mad.RejectPrivateLen ||
			!bytes.Equal(rej.PrivateData[:min(len(priv), mad.RejectPrivateLen)], priv[:min(len(priv), mad.RejectPrivateLen)])) {
			t.Fatalf("%v: private data %x", e.kind, rej.PrivateData)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("an error without text")
		}
	})
}
