package netio

import "testing"

// TestAsThroughTee: a Tee is a Poller, an Unwatcher or a Multicaster exactly when the
// Conn under it is one (it has all three methods, passing through).
func TestAsThroughTee(t *testing.T) {
	c := listen(t, "127.0.0.1:0", UDPOptions{})
	plain := struct{ Conn }{c} // the Conn methods only
	for _, tc := range []struct {
		name string
		c    Conn
		want bool
	}{{"UDP Conn", c, true}, {"Conn methods only", plain, false}} {
		for _, x := range []Conn{tc.c, Tee(tc.c, &fakeRecorder{})} {
			_, p := AsPoller(x)
			_, u := AsUnwatcher(x)
			_, m := AsMulticaster(x)
			if p != tc.want || u != tc.want || m != tc.want {
				t.Errorf("%s (%T): Poller %v, Unwatcher %v, Multicaster %v; want %v each", tc.name, x, p, u, m, tc.want)
			}
		}
	}
}
