package perftest

// udQKey is the Q_Key of UD tests, perftest's DEF_QKEY.
const udQKey = 0x11111111

// operation is the operation a test measures.
type operation int

const (
	opSend operation = iota
	opWrite
	opRead
	opAtomic
)

// verb is the operation as the tools' names spell it.
func (t operation) verb() string { return [...]string{"send", "write", "read", "atomic"}[t] }

// title is the banner's name of the test, as perftest prints it.
func (t operation) title(lat bool, atomic string) string {
	s := [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic " + atomic}[t]
	if lat {
		return s + " Latency Test"
	}
	return s + " BW Test"
}

// name is the tool's name: send_bw, write_lat, ...
func (t operation) name(lat bool) string {
	if lat {
		return t.verb() + "_lat"
	}
	return t.verb() + "_bw"
}
