//go:build !linux

// Command ringcost is Linux only (main.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "ringcost: Linux only")
	os.Exit(2)
}
