package rstream

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
)

// rstream's run: the connections, the transfers and the result table, as rstream.c's
// run, run_test and show_perf.

// test is one row: iterations of count transfers of size bytes each way.
type test struct {
	name                    string
	size, count, iterations int
}

// session is one side's state across its tests.
type session struct {
	o      *options
	in     *tool.Interrupter
	l      net.Listener // the server's
	conn   net.Conn
	buf    []byte
	txByte byte // the next byte -T v writes (rstream's format_buf)
	rxByte byte // the next byte -T v expects (rstream's verify_buf)
	rxSeen int64
}

func (o *options) run(in *tool.Interrupter) error {
	s := &session{o: o, in: in}
	size := o.xferSize
	if !o.custom {
		size = testSizes[len(testSizes)-1].size
	}
	s.buf = make([]byte, max(size, 16))
	if o.server == "" {
		l, err := o.listen()
		if o.ready != nil {
			o.ready <- err
		}
		if err != nil {
			return fmt.Errorf("%s listen: %w", o.network(), err)
		}
		s.l = l
		in.OnStop(func() { l.Close() })
		defer l.Close()
	}
	fmt.Fprintf(o.out, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n",
		"name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	if o.custom {
		return in.Result(s.runTests([]test{{"custom", o.xferSize, o.count, o.iterations}}))
	}
	// rstream's default: the latency tests on one connection, then the bandwidth tests
	// on another.
	var lat, bw []test
	for _, t := range testSizes {
		if t.all && !o.all {
			continue
		}
		n := transferCount(t.size)
		lat = append(lat, test{sizeStr(int64(t.size)) + "_lat", t.size, 1, n})
		bw = append(bw, test{sizeStr(int64(t.size)) + "_bw", t.size, n, 1})
	}
	if err := s.runTests(lat); err != nil {
		return in.Result(err)
	}
	return in.Result(s.runTests(bw))
}

// transferCount is rstream's size_to_count: fewer transfers of larger sizes.
func transferCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// runTests connects, runs tests on the connection and closes it.
func (s *session) runTests(tests []test) error {
	if err := s.connect(); err != nil {
		return err
	}
	defer s.conn.Close()
	for _, t := range tests {
		if err := s.runTest(t); err != nil {
			return err
		}
	}
	return s.shutdown()
}

// linger bounds how long a side waits for its peer's end of stream.
const linger = 5 * time.Second

// shutdown ends the connection as rstream's rs_shutdown(SHUT_RDWR) before close: each
// side half-closes and reads to the peer's half-close, which comes after everything
// the peer sent, so neither side leaves while the other still sends, and a peer that
// sent more than the test says is an error.
func (s *session) shutdown() error {
	cw, ok := s.conn.(interface{ CloseWrite() error })
	if !ok {
		return nil
	}
	if err := cw.CloseWrite(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	s.conn.SetReadDeadline(time.Now().Add(linger))
	if n, err := io.Copy(io.Discard, s.conn); err != nil || n > 0 {
		return fmt.Errorf("shutdown: %d bytes more, %v", n, err)
	}
	return nil
}

func (s *session) connect() error {
	var err error
	if s.l != nil {
		s.conn, err = s.l.Accept()
		if err != nil {
			return fmt.Errorf("%s accept: %w", s.o.network(), err)
		}
	} else if s.conn, err = s.o.dial(s.in.Context()); err != nil {
		return fmt.Errorf("%s connect: %w", s.o.network(), err)
	}
	c := s.conn
	s.in.OnStop(func() { c.Close() })
	return s.o.setBuffers(c)
}

// runTest is rstream's run_test: a 16-byte exchange to start together, then the timed
// transfers (the client sends count, the server sends them back, iterations times),
// and the row.
func (s *session) runTest(t test) error {
	client := s.l == nil
	if err := s.exchange(client, 16); err != nil {
		return err
	}
	start := time.Now()
	for range t.iterations {
		for range t.count {
			if err := s.xfer(client, t.size); err != nil {
				return err
			}
		}
		for range t.count {
			if err := s.xfer(!client, t.size); err != nil {
				return err
			}
		}
	}
	showPerf(s.o.out, t, time.Since(start))
	return nil
}

// exchange sends size bytes one way and then the other, the client first.
func (s *session) exchange(client bool, size int) error {
	if err := s.xfer(client, size); err != nil {
		return err
	}
	return s.xfer(!client, size)
}

// xfer sends (or receives) one transfer of size bytes, with -T v's running byte pattern.
func (s *session) xfer(send bool, size int) error {
	b := s.buf[:size]
	if send {
		if s.o.verify {
			for i := range b {
				b[i] = s.txByte
				s.txByte++
			}
		}
		if _, err := s.conn.Write(b); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		return nil
	}
	if _, err := io.ReadFull(s.conn, b); err != nil {
		return fmt.Errorf("recv: %w", err)
	}
	if s.o.verify {
		for i := range b {
			if b[i] != s.rxByte {
				return fmt.Errorf("data verification failed byte %d", s.rxSeen+int64(i))
			}
			s.rxByte++
		}
		s.rxSeen += int64(size)
	}
	return nil
}
