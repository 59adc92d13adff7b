package main

import "testing"

// TestRdmaServerClient runs librdmacm's rdma_server and rdma_client as two processes: one
// connection, 16 bytes each way, both ending with status 0.
func TestRdmaServerClient(t *testing.T) {
	a, b := addrPair(t)
	port := freePort(t, a)
	sr, cli := runCMPair(t, "rdma_server: start", []string{"rdma_server", "-s", a, "-p", port},
		[]string{"rdma_client", "-s", a, "-b", b, "-p", port})
	if sr.stdout != "rdma_server: start\nrdma_server: end 0\n" {
		t.Errorf("server printed %q", sr.stdout)
	}
	if cli.stdout != "rdma_client: start\nrdma_client: end 0\n" {
		t.Errorf("client printed %q", cli.stdout)
	}
}
