package rdmanet

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"
)

// pattern is n bytes that both sides of a test can make from seed alone.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{0: byte(seed), 1: byte(seed >> 8), 2: byte(seed >> 16), 3: byte(seed >> 24)}).Read(b)
	return b
}

// A program may exit the moment Close returns, and nothing of this user-space stack
// outlives it: the bytes it wrote and its CLOSE must have reached the peer by then, as
// over TCP, whose kernel sends them after the process is gone.
func TestCloseThenExitDeliversEverything(t *testing.T) {
	l, _ := listenDial(t)
	want := pattern(1, 3*ringSize+777)
	for round := range 3 {
		// Each round's process on an address of its own: a new software device numbers
		// its QPs from the same first QPN, and the listener's CM would take a second
		// process on the same address for the first one's stale connection (REJ) until
		// that one's disconnect ends.
		ch := startChild(t, "write-close-exit", "RDMANET_TEST_ADDR="+l.Addr().String(),
			"RDMANET_TEST_LOCAL="+freeAddr(t).String(), "RDMANET_TEST_SIZE="+strconv.Itoa(len(want)))
		c := acceptFrom(t, l, ch)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			ch.fatal(t, "round %d: reading what the exited peer wrote: %v (%d of %d bytes)", round, err, len(got), len(want))
		}
		if !bytes.Equal(got, want) {
			ch.fatal(t, "round %d: read %d bytes, not the %d written", round, len(got), len(want))
		}
		ch.expect(t, "closed")
		if err := ch.wait(); err != nil {
			t.Fatalf("round %d: child: %v\n%s", round, err, ch.stderr.String())
		}
	}
}

// childWriteCloseExit dials RDMANET_TEST_ADDR from RDMANET_TEST_LOCAL, writes
// RDMANET_TEST_SIZE bytes of pattern 1, closes, and exits at once.
func childWriteCloseExit() error {
	local, err := netip.ParseAddr(os.Getenv("RDMANET_TEST_LOCAL"))
	if err != nil {
		return err
	}
	size, err := strconv.Atoi(os.Getenv("RDMANET_TEST_SIZE"))
	if err != nil {
		return err
	}
	d := &Dialer{LocalAddr: local, Timeout: 10 * time.Second}
	c, err := d.DialContext(context.Background(), "rdma", os.Getenv("RDMANET_TEST_ADDR"))
	if err != nil {
		return err
	}
	if _, err := c.Write(pattern(1, size)); err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}
	_, err = os.Stdout.WriteString("closed\n")
	return err
}
