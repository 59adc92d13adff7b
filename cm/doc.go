// Package cm is the RDMA connection manager: librdmacm's semantics in Go
// shapes, speaking the InfiniBand CM protocol (IBTA Vol. 1 ch. 12) in MADs
// on QP1, as Linux's rdma_cm does on RoCE, so a goverbs program and a
// librdmacm program (rping, ucmatose, perftest -R) connect to each other.
//
// An Agent is the CM of one device. The passive side listens on a port
// and answers requests:
//
//	l, _ := agent.Listen(7174, 0)
//	req, _ := l.Accept(ctx)              // RDMA_CM_EVENT_CONNECT_REQUEST
//	conn, _ := req.Accept(ctx, &cm.Param{QP: qp, ResponderResources: 1, InitiatorDepth: 1})
//
// or refuses with req.Reject(privateData). The active side dials:
//
//	conn, err := agent.Dial(ctx, netip.MustParseAddrPort("10.0.0.2:7174"), &cm.Param{QP: qp, ...})
//
// The QP may be the program's, in RESET or in INIT: InitQP brings a new one to
// INIT as rdma_create_qp does, so its first receives can be posted before
// connecting. With no QP, the CM creates one from Param's PD and QPInit.
//
// The agent's device is the program's choice; DeviceFor finds the configured
// software device bound to an address, and SourceAddr the address a route to the
// server leaves from, which is what rdma_resolve_addr binds to without a source.
//
// Either way the result is an established connection whose QP is in RTS:
// the CM has exchanged QPNs, starting PSNs, GIDs, READ depths and retry
// counts, and walked the QP through INIT, RTR and RTS. conn.Done is closed
// when either side disconnects (DREQ/DREP); the QP is then in the error
// state. A peer's refusal is a *RejectError with the REJ's reason and
// private data; a peer that never answers ends in ErrTimeout after the
// CM's retries (rdma_cm's: 15 retries of a 4.3 s response timeout plus two
// 1 s packet lifetimes); a cancelled context abandons the handshake with a
// REJ.
//
// UD services are resolved rather than connected (SIDR, IBTA 12.11): the server
// takes requests from ListenUD's Listener and answers with Request.AcceptUD and its
// UD QP; the client's ResolveUD returns the QPN, the Q_Key (rdma_cm's 0x01234567)
// and an address handle to send with.
//
// Multicast is joined rather than resolved: JoinMulticast (rdma_join_multicast on
// RoCE, where no MAD is sent) attaches a UD QP to the group and returns the group's
// address handle, QPN (0xFFFFFF) and Q_Key; Multicast.Leave is rdma_leave_multicast.
//
// Private data has librdmacm's budgets: 56 bytes in Dial (rdma_cm's
// 36-byte address header takes the rest of the REQ's 92), 196 in Accept,
// 148 in Reject; 180 in ResolveUD, 136 in AcceptUD; more is
// ErrPrivateDataTooLong before anything is sent.
//
// # Why no event channel
//
// librdmacm's programs create an id, resolve the address, resolve the
// route, connect, and read each step's outcome from an event channel
// (RDMA_CM_EVENT_ADDR_RESOLVED, ROUTE_RESOLVED, ESTABLISHED, REJECTED,
// DISCONNECTED...). On RoCE the address and route are local knowledge (the
// GID is the IP address, no subnet manager is asked), so those steps cannot
// wait and Dial folds them in; the remaining events are the outcomes of
// Dial, Listener.Accept and Request.Accept (returned values and errors) and
// Conn.Done for a disconnection, which is what a Go program selects on.
// A C program ported line by line maps rdma_connect + wait for ESTABLISHED
// to Dial, rdma_get_request to Listener.Accept, rdma_accept to
// Request.Accept, rdma_disconnect to Conn.Disconnect.
//
// The protocol itself (state machine, retransmission, duplicates, stale
// connections, timewait) is cm/internal/ibcm, free of goroutines and
// clocks; the message formats are cm/mad.
//
// # Kernel RDMA devices
//
// In builds with the ibverbs tag, the agent of a kernel device (rxe0, an RNIC,
// opened through the ibverbs provider) is a client of the kernel's rdma_cm through
// the system's librdmacm, with the same API: one event channel per agent waited on
// in the netpoller, the program's QPs user-managed and moved with
// rdma_init_qp_attr's attributes (kernel.go). DeviceFor finds such a device by
// address. What differs is in docs/guide/cm-kernel.md.
package cm
