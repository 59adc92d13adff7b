package pingpong

import (
	"fmt"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/tool"
	"github.com/goverbs/goverbs/verbs"
)

// loop is the ping-pong of rdma-core's examples: the client sends first; each side sends
// again once its previous send completed and the peer's message arrived.
func (c *side) loop(client bool) error {
	n := len(c.qps)
	pending := make([]int, n)
	index := make(map[uint32]int, n)
	for i, qp := range c.qps {
		index[qp.QPN()] = i
		pending[i] = wrRecv
	}
	iters := c.o.iters
	scnt, rcnt := 0, 0
	if client {
		if c.o.chk {
			c.markPages()
		}
		for i := range c.qps {
			if err := c.postSend(i); err != nil {
				return err
			}
			pending[i] = wrRecv | wrSend
		}
	}
	start := time.Now()
	low := 1
	if c.kind == SRQ {
		low = n
	}
	for rcnt < iters || scnt < iters {
		wcs, err := c.cq.Wait()
		if err != nil {
			return err
		}
		for j := range wcs {
			wc := &wcs[j]
			if wc.Status != verbs.WCSuccess {
				return tool.WCError(wc)
			}
			qi, ok := index[wc.QPN]
			if !ok {
				return fmt.Errorf("completion for unknown QPN 0x%06x", wc.QPN)
			}
			switch wc.ID {
			case wrSend:
				scnt++
			case wrRecv:
				c.routs--
				if c.routs <= low {
					k, err := c.postRecv(c.o.rxDepth - c.routs)
					c.routs += k
					if err != nil {
						return err
					}
				}
				rcnt++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
			}
			pending[qi] &^= int(wc.ID)
			if scnt < iters && pending[qi] == 0 {
				if err := c.postSend(qi); err != nil {
					return err
				}
				pending[qi] = wrRecv | wrSend
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(c.o.size) * int64(iters) * 2
	fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec/1e6, usec/float64(iters))
	if c.o.chk && !client {
		c.checkPages()
	}
	return nil
}
