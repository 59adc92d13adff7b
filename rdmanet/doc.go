// Package rdmanet is a stream socket over RDMA: net.Conn and net.Listener over an
// RC queue pair, so that net/http, gRPC, database drivers and io.Copy run over RDMA
// by changing their dialer and listener.
//
// # The stream protocol
//
// The design is rsockets' (librdmacm): each side has a receive ring in registered
// memory, the peer writes stream bytes straight into it with RDMA WRITE WITH
// IMMEDIATE, and buffers and credits returned by the reader keep the writer from
// overwriting what has not been read.
//
// Why WRITE WITH IMMEDIATE. A stream needs bytes to land in order in memory the
// reader copies from, and the reader to learn how many. A WRITE WITH IMMEDIATE does
// both in one message: the bytes go straight to their place in the ring and the
// immediate carries the length, consuming a receive that needs no buffer. SEND into
// posted buffers would need a buffer per message whatever its size (a 1-byte write
// pins a whole buffer, or many small ones cut a large write up) and reassembly
// across them; a READ-based pull costs a round trip before every transfer (the
// reader must first hear where the bytes are), which is a request/response's
// latency doubled. goverbs' own perftest tools agree: WRITE leads SEND for small
// and middling messages, which is where a stream's messages mostly are, SEND leads
// only at the largest, and READ pays the extra round trip everywhere (the figures are
// in docs/DESIGN.md, "Streams over RDMA"; `goverbs write_bw`, `send_bw` and `read_bw`
// re-measure them).
//
// The protocol is rsockets' (rdma-core's librdmacm/docs/rsocket; librdmacm/rsocket.c is
// the reference implementation), so an rdmanet program and a C program using rsockets
// connect to each other in either role.
//
// Setup. The connection is made by rdma_cm in the TCP port space (package cm: service ID
// 0x0106<<16 | port, rdma_cm's 36-byte address header before the REQ's private data).
// The REQ's and the REP's private data carry rs_conn_data, 40 bytes, every field
// big-endian:
//
//	0      version (1)
//	1      flags: 1 the sender is big-endian (the byte order of the SGEs written into its
//	       target SGL), 2 it has an iomap (rdmanet: none)
//	2..3   credits: data messages the peer may send before the first credit update
//	4..6   reserved (0)
//	7      target_iomap_size (rdmanet: 0)
//	8..23  target SGL: addr, key (4), length (4) in entries: where the peer writes the
//	       buffers this side frees (rdmanet: 2 entries, as rsockets)
//	24..39 data buffer: addr, key, length: the first buffer the peer may write (rdmanet:
//	       the first half of its 1 MiB ring)
//
// A REQ whose private data is not this is refused with a REJ.
//
// Immediates. Every message is an RDMA WRITE WITH IMMEDIATE whose immediate's top 3
// bits are its operation and low 29 its value:
//
//	0 DATA     the WRITE's bytes (≥ 1) went into the writer's current target buffer
//	4 SGL      credit update: the low 16 bits are the sequence number up to which the
//	           peer may send data messages; a 16-byte WRITE also gave it a buffer, an
//	           SGE in the next entry of its target SGL
//	6 IOMAP    an iomap entry changed (never sent; received, it is a violation)
//	7 CTRL     0 DISCONNECT (closed: reads and writes no more), 1 KEEPALIVE,
//	           2 SHUTDOWN (writes no more)
//
// The other operations (1, 2, 3, 5) are a protocol violation, as are data beyond the
// credits or beyond the buffers given, a credit that moves the window by more than the
// credits or backwards, and an SGL update out of turn. A violation fails the connection
// with an error that says which; the device and other connections are untouched.
//
// Data. A writer fills the buffer the peer gave it to the end before it takes the next
// (a message never spans two), with messages of at most 64 KiB. The receiver gives its
// ring in two halves: the first in rs_conn_data, the second at once as the first SGL
// update, and each again once the reader has emptied it; an update is RDMA-written into
// the writer's target SGL, entries in turn from entry 1, in the byte order the
// writer's flags ask for. Credits are 16-bit sequence numbers of data messages: the
// receiver keeps a receive posted for each credit, reposting as they complete, and
// sends an update (with a buffer, or alone as a zero-length WRITE WITH IMMEDIATE to
// address 0) once half of either is used. A slow reader thus stops the writer at one
// ring: memory is bounded by it, and nothing is sent that finds no receive.
//
// Sending. Write copies into a 1 MiB staging buffer and WRITEs from it; its space is
// free again when the WRITE completes. WRITEs are signaled every 16th, once a quarter
// of the staging buffer has gone unsignaled, and whenever one leaves the writer no room
// (a send queue completes in order, so one completion retires the unsignaled WRITEs
// before it). At most 4 control messages are in flight (rsockets' RS_QP_CTRL_SIZE),
// two of them kept for SHUTDOWN and DISCONNECT. A writer that has waited for room for a
// second sends rsockets' keepalive, a zero-length RDMA WRITE to address 0 with key 0,
// which only a peer that is gone leaves unacknowledged: its retries then fail the
// connection.
//
// Copies. Write copies into the staging buffer (the sender's only copy; the
// receiver's is Read's, out of the ring). io.Copy avoids one of them on either side:
// ReadFrom reads its source straight into the staging buffer, and WriteTo hands the
// ring's bytes to its destination, crediting them after.
//
// Waiting. A Read that finds nothing, and a Write that finds no room, polls the
// connection's CQ itself before it blocks, as rsockets polls for its polling_time: for
// 50 µs, or up to 250 µs while its waits have been taking longer (twice the longest
// recent one). On a software device an empty poll reads the socket, so a
// request/response's answer reaches the waiter without a wake-up. It spins only while
// spinning has paid: after two spins in a row that found nothing the next waits block
// at once; a spin yields the processor to other threads every few polls while yields
// show another thread waiting for the core, so that a peer sharing it runs; and when
// yields keep giving the core away, the spinning thread moves itself to another CPU its
// affinity allows, so that the two ends' spinners do not share one core while another
// idles (docs/DESIGN.md, "Streams over RDMA"). The connection's completion goroutine never
// spins, and stays out of the way (off the device's socket) while the waiters spin; a
// Write polls once after each large chunk it posts.
//
// Close. CloseWrite sends SHUTDOWN after every DATA already posted: the peer reads
// them, then io.EOF; this side may still read. Close sends DISCONNECT: the peer reads
// what was sent and then io.EOF, and its writes fail with ErrPeerClosed. Close returns
// once every message it posted is acknowledged and the queue pair is destroyed (which
// sends any acknowledgement this side still owed the peer), 1 s at most for a peer
// that does not answer; then the connection manager's DREQ follows, as rsockets'
// rclose destroys its QP before its rdma_cm id. Nothing of a user-space stack outlives
// its process, so a program that exits right after Close would otherwise lose the
// bytes not yet sent, and leave the peer retransmitting its DISCONNECT.
//
// # Datagrams
//
// ListenPacket("rdma", "host:port") opens a PacketConn, a net.PacketConn in rsockets'
// datagram protocol (librdmacm's SOCK_DGRAM rsockets): a UDP socket on the device's
// address, over which a peer's UD QP number is learnt (a 16- or 28-byte header before
// the first datagrams, answered by a header-only control message), and a UD QP over
// which datagrams then go behind an 8- or 24-byte header naming the sender's address and
// UDP port. The headers field by field are in dgram_proto.go and
// docs/guide/cm-rdmanet.md, "Datagram rsockets".
//
// # The API
//
// Listen("rdma", "host:port") listens on the RDMA device whose address is host
// (a configured one, GOVERBS_DEVICES, or else a software device opened on host),
// shared by everything in the process that uses that address and closed with its
// last user; the port is an rdma_cm port in the TCP port space, 0 picking a free one.
// Dial and Dialer.DialContext connect through the connection manager (package cm),
// so an rdmanet listener is an rdma_cm listener on the wire and the setup messages
// travel in the REQ's and REP's private data. A program whose library dials "tcp"
// (net/http's Transport) passes its own dial function:
//
//	d := &rdmanet.Dialer{}
//	tr := &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
//		return d.DialContext(ctx, "rdma", addr)
//	}}
package rdmanet
