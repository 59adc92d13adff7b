package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/testaddr"
)

// TestHello runs the example as a program and checks what arrived, on two loopback
// addresses no other process held a moment ago (test binaries of other packages, and
// other people's, run at the same time).
func TestHello(t *testing.T) {
	a, b := testaddr.Free(t, testaddr.Examples), testaddr.Free(t, testaddr.Examples)
	out, err := exec.Command("go", "run", ".", a.String(), b.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	for _, want := range []string{
		`b's memory after WRITE: "written by RDMA WRITE"`,
		`b received 15 bytes by SEND: "hello over SEND"`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
