// Package verbs is RDMA verbs for Go: libibverbs' object model in Go shapes, over a
// software RoCEv2 device that runs inside the process (no kernel module, no RNIC), and
// over any other provider registered with package verbs/driver.
//
// # The objects
//
// A program uses them in this order, each made from the one before:
//
//   - [Device]: an RDMA device opened with [Open] (one listed by [Devices]) or
//     [OpenSoft]. A software device is a UDP socket on one IP address that speaks
//     RoCEv2 (UDP port 4791) as an RNIC does; its port's GID is that address.
//   - [PD], a protection domain ([Device.AllocPD]): memory regions, address handles and
//     queue pairs work together only within one.
//   - [MR], a memory region ([PD.RegMR]): a byte slice registered for access. Its lkey
//     names it in local work requests ([MR.SGE]); its rkey and address let a peer READ,
//     WRITE or run atomics on it, as far as its [Access] flags allow.
//   - [CQ], a completion queue ([Device.CreateCQ]): where finished work requests are
//     reported as [WC] values, read with [CQ.Poll], or awaited through a [CompChannel].
//   - [QP], a queue pair ([PD.CreateQP]): a send queue and a receive queue, of type RC
//     (reliable connected), UC or UD. A QP is brought from RESET through INIT and RTR
//     (ready to receive) to RTS (ready to send) with [QP.Modify], given the peer's QP
//     number and GID, which two programs exchange out of band. Then [QP.PostSend]
//     queues SENDs, RDMA WRITEs and READs and atomics, and [QP.PostRecv] gives buffers
//     for the peer's SENDs.
//
// Beside them: [SRQ] (a receive queue shared by QPs), [AH] (the destination of a UD
// send), [MW] (a window onto part of an MR with its own rkey), [XRCD] (an XRC domain:
// XRC_SEND QPs deliver into XRC SRQs named by number, through XRC_RECV QPs) and
// [Device.Events] (asynchronous events).
//
// The runnable examples show whole programs: an RDMA WRITE and READ between two devices,
// and a SEND/RECV whose receiver waits on a completion channel. examples/hello in the
// repository is another, and cmd/goverbs holds the rdma-core and perftest tools.
//
// # Errors and completions
//
// Calls return Go errors that wrap the sentinels of this package (match them with
// errors.Is: [ErrClosed], [ErrQPState], ...); a refused work request is a [*PostError].
// What happens to a work request on the wire is reported in the Status of its
// completion ([WC]), as with libibverbs.
//
// # Closing
//
// Every object has a Close, with the same rules on every provider:
//
//   - After X.Close, every call of X that returns an error returns one matching
//     [ErrClosed], and a second Close does too, as with [os.File]. Calls that return no
//     error stay safe: a closed QP's [QP.State] is ERR, the others report what they last
//     knew.
//   - [Device.Close] closes everything made from the device (ibv_close_device releases
//     the context's resources): its QPs stop, no completion appears later, blocked
//     [CompChannel.Wait] calls return and [Device.Events] closes. Every call on the
//     device or on one of its objects then matches ErrClosed.
//   - A PD, CQ, SRQ, MR or CompChannel that others still use refuses to close with an
//     error matching [ErrBusy] and stays open, as libibverbs' destroy calls return
//     EBUSY: close QPs before their CQs and SRQs, CQs before their channel, regions
//     after the windows bound to them, and a PD last.
//
// # Performance
//
// Posting and polling allocate nothing, not even for a work request written in place
// with a literal SGL: a provider reads the caller's requests and fills the caller's
// completions where they are. A software device opened with BusyPoll set in its
// [SoftConfig] processes packets in the goroutine that polls its CQ, for the lowest
// latency.
package verbs
