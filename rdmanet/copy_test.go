package rdmanet

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"testing"
)

// io.Copy into a Conn reads through ReadFrom and out of one through WriteTo, with
// reads of every size, and the bytes arrive intact.
func TestCopyUsesReadFromAndWriteTo(t *testing.T) {
	a, b := pair(t)
	data := make([]byte, 5*ringSize+333)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	errc := make(chan error, 1)
	go func() {
		// Not a bytes.Reader: io.Copy would call its WriteTo instead.
		n, err := io.Copy(a, &ragged{r: bytes.NewReader(data)})
		if err == nil && n != int64(len(data)) {
			err = io.ErrShortWrite
		}
		if err == nil {
			err = a.CloseWrite()
		}
		errc <- err
	}()
	h := sha256.New()
	n, err := io.Copy(struct{ io.Writer }{h}, b)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("io.Copy from the Conn: %d bytes, %v; want %d", n, err, len(data))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("bytes damaged")
	}
}

// ragged is a reader that returns short reads of random sizes.
type ragged struct{ r io.Reader }

func (g *ragged) Read(p []byte) (int, error) {
	return g.r.Read(p[:min(len(p), 1+rand.IntN(100000))])
}
