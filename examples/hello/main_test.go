package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHello runs the example as a program and checks what arrived. It uses its own
// addresses: other packages' tests use 127.0.0.2 and 127.0.0.3 at the same time.
func TestHello(t *testing.T) {
	out, err := exec.Command("go", "run", ".", "127.0.20.2", "127.0.20.3").CombinedOutput()
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
