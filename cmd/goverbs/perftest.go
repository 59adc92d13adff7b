package main

type perfTest int

const (
	testSend perfTest = iota
	testWrite
	testRead
	testAtomic
)

func perfCmd(t perfTest, lat bool) func([]string) error {
	return func(args []string) error { return nil }
}
