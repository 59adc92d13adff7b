// Package ibverbs is the verbs provider for real RDMA devices: it reaches the kernel's
// RDMA stack (hardware RNICs such as mlx5, and the kernel's Soft-RoCE rxe and siw)
// through libibverbs, with cgo.
//
// It exists only in builds with the ibverbs tag (cgo and Debian's libibverbs-dev):
//
//	go build -tags ibverbs ./...
//
// Package verbs imports it under that tag, so a program needs no change: verbs.Devices
// lists the kernel's devices (rxe0, mlx5_0, …) beside the software ones, and
// verbs.Open("rxe0") opens one. Without the tag this package is empty.
//
// How the objects map:
//   - Memory regions register the caller's Go memory in place. Go's collector does not
//     move heap objects, and a runtime.Pinner pins the buffer for the region's life, which
//     is what cgo's rules ask of a Go pointer that C (here, the device's DMA) keeps after
//     a call returns. Memory from verbs.Mmap lies outside the Go heap and needs no pin.
//   - Completion channels: one ibv_comp_channel per device, its descriptor non-blocking in
//     Go's netpoller; a goroutine parked there (no thread) turns each event into the CQ's
//     notification. Asynchronous events come the same way from the device's async fd.
//   - The data path: each QP and CQ owns C memory for work requests and completions. A
//     post converts the Go work requests into it and posts the whole list with one cgo
//     call; a poll fetches up to 64 completions per call. Neither allocates.
//   - Counters are the kernel's, from sysfs (ports/N/hw_counters and ports/N/counters);
//     the verbs API has no per-QP counters, so QP.Counters reports zeros.
//   - Errors are the kernel's errno values wrapped under the verbs sentinels.
package ibverbs
