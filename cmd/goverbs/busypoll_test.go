package main

import (
	"testing"
	"time"
)

// TestBusyPollClient: a ping-pong whose client busy-polls ends with both sides exiting
// 0. The client's last poll owes the ACK of the server's last SEND, and the client
// closes at once; the server used to fail with "transport retry counter exceeded (12)
// for wr_id 2" every run (the ACK went with the QP).
func TestBusyPollClient(t *testing.T) {
	for _, kind := range []string{"rc", "srq"} {
		t.Run(kind, func(t *testing.T) {
			a, b := addrPair(t)
			common := []string{"-p", freePort(t, a), "-g", "0", "-n", "100"}
			srv := startServer(t, "local address:", append([]string{kind + "_pingpong", "--bind", a}, common...)...)
			cli := runBin(t, 30*time.Second, append(append([]string{kind + "_pingpong", "--bind", b, "--busy-poll"}, common...), a)...)
			mustSucceed(t, kind+" client (--busy-poll)", cli)
			mustSucceed(t, kind+" server", srv.wait(t))
		})
	}
}
