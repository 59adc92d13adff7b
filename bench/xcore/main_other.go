//go:build !linux

// Command xcore is Linux only (main.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "xcore: Linux only")
	os.Exit(2)
}
