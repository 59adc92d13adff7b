// Package shm is shared memory between goverbs processes of one user on one host:
// memfd-backed regions passed over unix sockets (SCM_RIGHTS), single-producer
// single-consumer rings in them, eventfd wake-ups, and the rendezvous sockets through
// which processes find each other.
//
// Two kinds of ring share one index discipline (Ring): a record ring (RecordRing) of
// variable-length records, which carries datagrams, and a slot ring (SlotRing) of
// fixed-size slots, for work and completion queue entries. Each side keeps its own
// index privately and only publishes it: the producer stores head with release
// semantics after writing a record, the consumer loads it with acquire semantics before
// reading one, and the reverse for tail. sync/atomic's operations are sequentially
// consistent, which is what the wake-up protocol needs:
//
//	producer: write records; store head; if sleeping is set, clear it and write the eventfd
//	consumer: store sleeping = 1; load head; if empty, wait on the eventfd; store sleeping = 0
//
// Either the producer sees the flag, or the consumer sees the new head; a consumer that
// spins never sets the flag, so a spinning pair never enters the kernel.
//
// # Hostile peers
//
// Everything in shared memory may be written by the peer at any time, with anything.
// A side never trusts an index it reads there: it checks it against its own copy and
// the ring's size, reads a record's length once and checks it before use, and copies
// a record out before anything parses it. A ring found inconsistent is reported
// (ErrCorrupt) and its records dropped and counted; nothing read from shared memory
// can make this package panic or touch memory outside the ring. A region received from
// a peer is mapped only if the peer cannot shrink it (F_SEAL_SHRINK): a shrunk memfd
// would turn our accesses into SIGBUS.
package shm
