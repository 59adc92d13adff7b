// Package server is the shared-device daemon's logic (`goverbs serve`): it owns each
// device's UDP socket and engine, accepts processes on a rendezvous socket per device,
// and runs their verbs for them. The protocol is package attach's
// (docs/attach-protocol.md); every process gets its own PDs, MRs, CQs and QPs on the
// device's one address and QPN space, and what it can name is only its own.
//
// Nothing a client sends, or writes into its shared queues, may panic the daemon or
// reach another client's objects: messages are decoded by attach.Reader, queue entries
// are copied out of shared memory before they are parsed, every handle is looked up
// in the sending client's own table, and an MR's memory is exactly the client's memfd
// mapping, so that every access the engine makes is checked against the client's
// registered ranges by the engine's key table as for any other region.
package server

import (
	"log/slog"
	"time"

	"github.com/goverbs/goverbs/verbs/soft"
)

// Config is what a daemon serves.
type Config struct {
	// Devices are the software devices to open and share.
	Devices []soft.Config
	// Dir holds the rendezvous and stat sockets (shm.Dir() when empty).
	Dir string
	// Spin is how long a client's queues are polled after the last work before the
	// daemon sleeps on the client's doorbell; zero sleeps at once. Spinning saves the
	// client's eventfd write and the daemon's wake-up per post, at a core per spinning
	// client: worth it only where the daemon has cores to itself.
	Spin time.Duration
	// Logger receives the daemon's events (clients attaching and leaving); nil is quiet.
	Logger *slog.Logger
}
