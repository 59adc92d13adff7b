module github.com/goverbs/goverbs

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/spf13/pflag v1.1.0
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require github.com/vishvananda/netns v0.0.5 // indirect
