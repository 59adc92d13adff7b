// Package engine is the goverbs software RDMA device: memory regions and keys, completion
// queues, queue pairs, and the RoCEv2 transport, split the way a hardware RNIC (and Linux
// Soft-RoCE) splits it:
//
//   - the requester turns send work requests into packets (requester.go),
//   - the responder validates and executes inbound requests and answers them (responder.go),
//   - the completer consumes acknowledgements and responses, retires work requests into
//     the completion queue and owns retransmission and RNR back-off (completer.go),
//   - the receive path reads the socket (drive.go) and checks every datagram and routes
//     it (input.go); every decision about sending ACKs is in ack.go; every packet leaves
//     through emit into a transmit batch (transmit.go).
//
// The engine works on verbs/driver's types (work requests, completions, enums, errors
// classified under driver's sentinels), so the public verbs package hands it the caller's
// slices as they are, and its objects satisfy driver's interfaces themselves. The engine
// does not know about the verbs package; package verbs/soft opens it as the software
// provider.
package engine
