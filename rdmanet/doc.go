// Package rdmanet is a stream socket over RDMA: net.Conn and net.Listener over an
// RC queue pair, so that net/http, gRPC, database drivers and io.Copy run over RDMA
// by changing their dialer and listener.
//
// # The stream protocol
//
// The design is rsockets' (librdmacm): each side has a receive ring in registered
// memory, the peer writes stream bytes straight into it with RDMA WRITE WITH
// IMMEDIATE, and credits returned by the reader keep the writer from overwriting what
// has not been read.
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
// Setup. When the connection is made (in rdma_cm's private data: the REQ's and the
// REP's), each side tells the other where its ring is, in 24 bytes, big-endian:
//
//	0      version (1)
//	1      flags (0; ignored on receipt)
//	2..3   message credits: data messages the peer may have in flight (1..256)
//	4..7   ring size in bytes (1 B..1 MiB, the most a version-1 peer stages)
//	8..15  ring address, as the peer's WRITEs name it
//	16..19 ring rkey
//	20..23 reserved (0)
//
// Immediates. Every message carries a 32-bit immediate whose top two bits are its
// operation:
//
//	00 DATA    RDMA WRITE WITH IMMEDIATE; bits 29..0: its length (≥ 1)
//	01 CREDIT  SEND WITH IMMEDIATE, no payload; bits 29..21: data messages
//	           credited back, bits 20..0: ring bytes read
//	10 FIN     SEND WITH IMMEDIATE, no payload: the sender writes no more (CloseWrite)
//	11 CLOSE   SEND WITH IMMEDIATE, no payload: the sender closed; it reads no more
//
// Data. The stream's bytes occupy the peer's ring in order: the n-th byte is at ring
// offset n mod size, and a message never wraps (one that would is split at the
// ring's end). RC delivers in order, so the receiver needs no offsets: each DATA
// completion adds its length to the bytes there are to read. The writer copies into
// a staging buffer that mirrors the peer's ring position for position, and may
// reuse a position once the peer has both acknowledged the WRITE (its completion)
// and read the bytes (its credit).
//
// Signaling. A data WRITE is signaled only every 16th, once a quarter of the ring
// has gone unsignaled, and whenever it leaves the writer no room for the next (the
// writer will wait for its completion); a send queue completes in order, so one
// completion retires the unsignaled WRITEs before it.
// Control SENDs are always signaled.
//
// Credits. A writer may have at most ring size bytes unread at the peer and at most
// the advertised message credits of DATA messages uncredited (and no more WRITEs
// unacknowledged than its send queue holds: a credit may overtake the ACK). The reader returns
// bytes as they are read and messages as their receives are reposted, in one CREDIT
// when a quarter of either is owed. A slow reader therefore stops the writer at one
// ring's worth: memory is bounded by the ring, and nothing is ever sent that has no
// receive waiting, so there are no RNR NAKs. A writer that has waited for credits
// for a second probes the peer with a zero-length RDMA WRITE, which only a peer that
// is gone leaves unacknowledged: its retries then fail the connection.
//
// Receives. Each side keeps 256 + 32 receives posted, without buffers (a WRITE WITH
// IMMEDIATE and a zero-length SEND only need the slot). The connection's completion
// goroutine reposts each as it completes, whatever the reader does; data messages
// use at most 256 of them (the credits), control messages at most 32 (a side keeps
// no more than 32 in flight, two of them reserved for FIN and CLOSE). A
// control receive is reposted when the goroutine sees its completion, a moment
// after the sender has its ACK; a sender sends control messages only as the peer's
// data and credits arrive, which that goroutine handles too, so few can be awaiting
// reposting, and the QPs' RNR retry covers the rest.
//
// Copies. Write copies into the staging buffer (the sender's only copy; the
// receiver's is Read's, out of the ring). io.Copy avoids one of them on either side:
// ReadFrom reads its source straight into the staging buffer, and WriteTo hands the
// ring's bytes to its destination, crediting them after.
//
// Waiting. A Read that finds nothing polls the connection's CQ itself for up to 50 µs,
// yielding between polls, before it blocks, as rsockets polls for its polling_time: on a
// software device an empty poll reads the socket, so a request/response's answer reaches
// the reader without a wake-up (docs/PERFORMANCE.md has bench/rstream.sh's comparison
// with Go TCP). A waiting Read therefore keeps a core busy for up to 50 µs, and the
// completion goroutine does the same after its last completion.
//
// Close. CloseWrite sends FIN after every DATA already posted: the peer reads them,
// then io.EOF; this side may still read. Close sends CLOSE: the peer reads what was
// sent and then io.EOF, and its writes fail with ErrPeerClosed. The closing side
// keeps its queue pair until every message it posted is acknowledged (at most 10 s),
// then releases it. Close itself returns once they are acknowledged (or after 1 s,
// for a peer that does not answer), as rsockets' rclose waits for its sends: nothing
// of a user-space stack outlives its process, so a program that exits right after
// Close would otherwise lose the bytes and the CLOSE not yet sent.
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
