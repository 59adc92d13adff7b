package verbs

// Counter is one named statistic.
type Counter struct {
	Name  string
	Value uint64
}

// Counters is a snapshot of a device's statistics, in the spirit of `rdma statistic`:
// packets and bytes each way, retransmissions, NAKs, and every reason a packet was dropped.
type Counters []Counter

// Get returns the named counter's value (0 if there is none).
func (c Counters) Get(name string) uint64 {
	for _, x := range c {
		if x.Name == name {
			return x.Value
		}
	}
	return 0
}

// QPCounters are one QP's statistics.
type QPCounters struct {
	TxPackets, RxPackets uint64
	Retransmits          uint64
	RetryTimeouts        uint64
	RNRNakSent           uint64
	RNRNakReceived       uint64
	SeqNakSent           uint64
	SeqNakReceived       uint64
	DuplicateRequests    uint64
}
