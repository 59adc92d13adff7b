package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// TestXSRQPingpong: goverbs' xsrq_pingpong, a server with -c 2 and two client processes
// (XRC_SEND QPs of two processes into the server's one XRC SRQ), prints rdma-core's
// address lines with the SRQ numbers and ends with "success" on every side.
func TestXSRQPingpong(t *testing.T) {
	a, b := addrPair(t)
	c := testaddr.Free(t, testaddr.Goverbs).String()
	port := freePort(t, a)
	common := []string{"-p", port, "-n", "30", "-s", "2500"}
	var srv result
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv = runBin(t, 60*time.Second, append([]string{"xsrq_pingpong", "--bind", a, "-c", "2"}, common...)...)
	}()
	p, _ := strconv.Atoi(port)
	for deadline := time.Now().Add(30 * time.Second); !tcpListening(p); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server never listened")
		}
	}
	var wg sync.WaitGroup
	cli := make([]result, 2)
	for i, addr := range []string{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli[i] = runBin(t, 60*time.Second, append(append([]string{"xsrq_pingpong", "--bind", addr}, common...), a)...)
		}()
	}
	wg.Wait()
	<-done
	for who, r := range map[string]result{"server": srv, "client 0": cli[0], "client 1": cli[1]} {
		mustSucceed(t, "xsrq_pingpong "+who, r)
		mustContain(t, who, r.stdout, "   local: LID 0000, QPN RECV ", "  remote: LID 0000, QPN RECV ", ", SRQN ",
			", GID ::ffff:127.", "success\n")
	}
	if n := strings.Count(srv.stdout, "  remote: "); n != 2 {
		t.Errorf("server: %d remote lines, want 2:\n%s", n, srv.stdout)
	}
}

// tcpListening reports whether a socket listens on TCP port (from /proc/net/tcp): a
// probing connection would be taken for a client by the server.
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	fh, err := os.Open("/proc/net/tcp")
	if err != nil {
		return false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}
