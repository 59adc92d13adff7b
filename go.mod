module github.com/goverbs/goverbs

go 1.26.8

require golang.org/x/sys v0.49.0

require github.com/spf13/pflag v1.1.0
