package rdmanet

import (
	"net"
	"testing"

	"golang.org/x/net/nettest"
)

// TestNetConn runs x/net's net.Conn conformance suite over a pair of Conns.
func TestNetConn(t *testing.T) {
	a, b := testDevices(t)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		ca, cb, err := testPair(t, a, b)
		if err != nil {
			return nil, nil, nil, err
		}
		stop = func() {
			ca.Close()
			cb.Close()
			<-ca.tornDown
			<-cb.tornDown
		}
		return ca, cb, stop, nil
	})
}
