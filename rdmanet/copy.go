package rdmanet

import (
	"io"
)

// io.Copy uses these to skip its intermediate buffer: ReadFrom reads straight into
// the staging buffer, WriteTo hands the ring's bytes straight to the writer. Each
// saves one copy of every byte.

var (
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
)

// ReadFrom writes what r yields until io.EOF, reading it directly into the memory
// the RDMA WRITEs send from. It returns the bytes written and the first error other
// than io.EOF.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var total int64
	for {
		c.mu.Lock()
		if err := c.writeErr(); err != nil {
			c.mu.Unlock()
			return total, c.opErr("readfrom", err)
		}
		chunk := c.txSpace(maxChunk)
		if chunk == 0 {
			c.mu.Unlock()
			c.waitWritable()
			continue
		}
		// The staging room stays ours while unlocked: only a writer, holding wmu,
		// moves the stream position, and the room only grows meanwhile.
		room := c.ep.stage.Buf()[c.stageOff():][:chunk]
		c.mu.Unlock()
		n, rerr := r.Read(room)
		n = max(0, min(n, len(room))) // a misbehaving reader cannot overrun the room
		if n > 0 {
			c.mu.Lock()
			err := c.writeErr()
			if err == nil {
				err = c.postStaged(n)
			}
			c.mu.Unlock()
			if err != nil {
				return total, c.opErr("readfrom", err)
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// WriteTo reads until the peer's FIN or CLOSE, writing the bytes to w directly from
// the receive ring. It returns the bytes written and the first error; the end of the
// stream is not an error.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	var total int64
	for {
		c.mu.Lock()
		ready, err := c.readable()
		if err == io.EOF {
			c.mu.Unlock()
			return total, nil
		}
		if err != nil {
			c.mu.Unlock()
			return total, c.opErr("writeto", err)
		}
		if !ready {
			c.mu.Unlock()
			c.waitReadable()
			continue
		}
		// Bytes not yet credited stay put while unlocked: the peer cannot reuse
		// their place before this side says it may.
		p := c.unread()
		c.mu.Unlock()
		n, werr := w.Write(p)
		n = max(0, min(n, len(p))) // nor a misbehaving writer free unread bytes
		c.mu.Lock()
		c.consumed(n)
		c.giveCredit()
		c.mu.Unlock()
		total += int64(n)
		if werr != nil {
			return total, werr
		}
	}
}
