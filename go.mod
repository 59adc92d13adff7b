module github.com/goverbs/goverbs

go 1.26.8

require (
	github.com/spf13/pflag v1.1.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)
