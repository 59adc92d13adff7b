//go:build ibverbs

package verbs

// Built with the ibverbs tag, every program that uses package verbs also gets the
// kernel's RDMA devices (hardware RNICs, rxe, siw) through libibverbs, with no change to
// its code: verbs.Devices lists them and verbs.Open opens them by name.
import _ "github.com/goverbs/goverbs/verbs/ibverbs"
