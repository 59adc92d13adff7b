package rdmanet

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
)

// The soak's streams are frames, so that a byte lost, duplicated, reordered or sent
// down the wrong connection fails the reader's check.
//
// A frame: connection ID, sequence number, payload length, payload, and the CRC-32
// of all before it. A frame with length 0 ends the stream: its sequence number is
// the count of frames before it.
const (
	frameHeader  = 4 + 8 + 4
	frameTrailer = 4
	maxPayload   = 64 << 10
)

// frameWriter writes one connection's stream of frames with payloads of random
// sizes (mostly small, some large) and random bytes.
type frameWriter struct {
	w   io.Writer
	id  uint32
	seq uint64
	rng *rand.Rand
	buf []byte
}

func newFrameWriter(w io.Writer, id uint32) *frameWriter {
	return &frameWriter{w: w, id: id, rng: rand.New(rand.NewPCG(uint64(id), 0x50a4)),
		buf: make([]byte, frameHeader+maxPayload+frameTrailer)}
}

func (fw *frameWriter) frame(n int) error {
	b := fw.buf[:frameHeader+n+frameTrailer]
	binary.BigEndian.PutUint32(b, fw.id)
	binary.BigEndian.PutUint64(b[4:], fw.seq)
	binary.BigEndian.PutUint32(b[12:], uint32(n))
	for p := b[frameHeader : frameHeader+n]; len(p) > 0; {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], fw.rng.Uint64())
		p = p[copy(p, w[:]):]
	}
	binary.BigEndian.PutUint32(b[frameHeader+n:], crc32.ChecksumIEEE(b[:frameHeader+n]))
	_, err := fw.w.Write(b)
	return err
}

// next writes the next data frame.
func (fw *frameWriter) next() error {
	n := 1 + fw.rng.IntN(512)
	if fw.rng.IntN(8) == 0 {
		n = 1 + fw.rng.IntN(maxPayload)
	}
	if err := fw.frame(n); err != nil {
		return err
	}
	fw.seq++
	return nil
}

// end writes the closing frame and half-closes the connection.
func (fw *frameWriter) end() error {
	if err := fw.frame(0); err != nil {
		return err
	}
	return fw.w.(interface{ CloseWrite() error }).CloseWrite()
}

// frameReader checks one connection's incoming stream.
type frameReader struct {
	r      *bufio.Reader
	id     uint32 // learnt from the first frame when want is -1
	want   int64
	frames uint64
	buf    []byte
}

// newFrameReader reads a connection's frames; the first names the connection, and every
// later one must come from it.
func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), want: -1,
		buf: make([]byte, frameHeader+maxPayload+frameTrailer)}
}

var errStreamEnd = errors.New("end frame")

// next reads and checks one frame: errStreamEnd after a well-placed end frame, the
// read's error, or what is wrong with the frame.
func (fr *frameReader) next() error {
	h := fr.buf[:frameHeader]
	if _, err := io.ReadFull(fr.r, h); err != nil {
		return err
	}
	id, seq, n := binary.BigEndian.Uint32(h), binary.BigEndian.Uint64(h[4:]), binary.BigEndian.Uint32(h[12:])
	if n > maxPayload {
		return fmt.Errorf("frame %d of connection %d: length %d", fr.frames, fr.id, n)
	}
	b := fr.buf[:frameHeader+int(n)+frameTrailer]
	if _, err := io.ReadFull(fr.r, b[frameHeader:]); err != nil {
		return fmt.Errorf("frame %d of connection %d cut short: %w", fr.frames, id, err)
	}
	if crc32.ChecksumIEEE(b[:frameHeader+n]) != binary.BigEndian.Uint32(b[frameHeader+n:]) {
		return fmt.Errorf("frame %d of connection %d: checksum mismatch", seq, id)
	}
	if fr.want < 0 {
		fr.want = int64(id)
	}
	if int64(id) != fr.want || seq != fr.frames {
		return fmt.Errorf("frame %d of connection %d arrived on connection %d after %d frames", seq, id, fr.want, fr.frames)
	}
	fr.id = id
	if n == 0 {
		return errStreamEnd
	}
	fr.frames++
	return nil
}
