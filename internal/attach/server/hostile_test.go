//go:build linux

package server_test

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
	"github.com/goverbs/goverbs/internal/attach/attachtest"
	"github.com/goverbs/goverbs/internal/attach/server"
	"github.com/goverbs/goverbs/internal/shm"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

func daemon(t *testing.T) (*server.Server, netip.Addr) { return attachtest.Daemon(t) }

// raw speaks the protocol by hand, as a hostile (or broken) C client might.
type raw struct {
	t   *testing.T
	c   *net.UnixConn
	ev  *net.UnixConn
	db  *shm.Eventfd
	seq uint32
}

func dialRaw(t *testing.T, addr netip.Addr) *raw {
	c, err := shm.Dial(attach.SocketPath(shm.Dir(), addr), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, c: c}
	t.Cleanup(func() { c.Close() })
	_, fds, errno := r.call(attach.OpHello, func(w *attach.Writer) {
		w.U32(attach.Version)
		w.U32(0)
		w.Str("hostile")
	})
	if errno != 0 || len(fds) != 2 {
		t.Fatalf("HELLO: errno %d, %d fds", errno, len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "ev")
	ec, _ := net.FileConn(f)
	f.Close()
	r.ev = ec.(*net.UnixConn)
	r.db, _ = shm.EventfdFrom(fds[1])
	t.Cleanup(func() { r.ev.Close(); r.db.Close() })
	return r
}

// createQPMsg writes CREATE_QP's request: a QP of type typ with cq as both CQs, no SRQ.
func createQPMsg(pd uint32, typ driver.QPType, cq uint32, c driver.QPCap) func(*attach.Writer) {
	return func(w *attach.Writer) {
		w.U32(pd)
		w.U8(uint8(typ))
		w.U8(0)
		w.U8(0)
		w.U8(0)
		w.U32(cq)
		w.U32(cq)
		w.U32(0)
		w.PutCap(c)
	}
}

func (r *raw) send(msg []byte, fds ...int) {
	if err := shm.Send(r.c, msg, fds...); err != nil {
		r.t.Fatal(err)
	}
}

func (r *raw) call(op attach.Op, build func(*attach.Writer), fds ...int) (attach.Reader, []int, int32) {
	r.t.Helper()
	w := attach.Writer{B: make([]byte, attach.HdrLen)}
	if build != nil {
		build(&w)
	}
	r.seq++
	attach.PutHeader(w.B, attach.Header{Op: op, Seq: r.seq, Len: uint32(len(w.B) - attach.HdrLen)})
	r.send(w.B, fds...)
	buf := make([]byte, attach.MaxMsg)
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, got, err := shm.Recv(r.c, buf)
	if err != nil {
		r.t.Fatalf("%v: no reply: %v", op, err)
	}
	h, p, err := attach.ParseHeader(buf[:n])
	if err != nil || h.Op != op|attach.ReplyBit || h.Seq != r.seq {
		r.t.Fatalf("%v: bad reply %+v %v", op, h, err)
	}
	return attach.Reader{B: p}, got, h.Errno
}

func (r *raw) must(op attach.Op, build func(*attach.Writer)) (attach.Reader, []int) {
	r.t.Helper()
	rd, fds, errno := r.call(op, build)
	if errno != 0 {
		r.t.Fatalf("%v: errno %d: %s", op, errno, rd.B)
	}
	return rd, fds
}

// TestHostileClient: a client that sends garbage commands and writes garbage into
// its queues gets errors and its own QP in the error state; the daemon and the other
// clients of the device go on.
func TestHostileClient(t *testing.T) {
	_, addr := daemon(t)
	h := dialRaw(t, addr)

	// Commands: garbage, unknown ops, short payloads, handles that are not ours, regions
	// the daemon must not map.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		op := attach.Op(rng.IntN(60)) // past the last command, XRC's included
		if op == attach.OpHello {
			continue
		}
		_, fds, _ := h.call(op, func(w *attach.Writer) {
			for j := rng.IntN(64); j > 0; j-- {
				w.U8(uint8(rng.Uint32()))
			}
		})
		shm.CloseFDs(fds)
	}
	p, _, _ := os.Pipe()
	if _, _, errno := h.call(attach.OpRegMR, func(w *attach.Writer) { w.U32(1); w.U32(1); w.U64(0); w.U64(4096); w.U64(0) }, int(p.Fd())); errno == 0 {
		t.Fatal("REG_MR of a pipe accepted")
	}
	mfd, _ := unix.MemfdCreate("unsealed", 0)
	unix.Ftruncate(mfd, 4096)
	pdr, _ := h.must(attach.OpAllocPD, nil)
	pd := pdr.U32()
	if _, _, errno := h.call(attach.OpRegMR, func(w *attach.Writer) { w.U32(pd); w.U32(1); w.U64(0); w.U64(4096); w.U64(0) }, mfd); errno == 0 {
		t.Fatal("REG_MR of an unsealed memfd accepted: the client could shrink it under the daemon")
	}
	unix.Close(mfd)

	// Queues: a QP whose send ring gets garbage.
	cqr, cqfds := h.must(attach.OpCreateCQ, func(w *attach.Writer) { w.U32(16) })
	cq := cqr.U32()
	shm.CloseFDs(cqfds)
	qpr, qpfds := h.must(attach.OpCreateQP, createQPMsg(pd, driver.QPTypeRC, cq, driver.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}))
	qp := qpr.U32()
	reg, err := shm.Map(os.NewFile(uintptr(qpfds[0]), "qp"), 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	mem := reg.Bytes()
	for i := shm.CtrlSize; i < len(mem); i++ {
		mem[i] = byte(rng.Uint32())
	}
	binary.LittleEndian.PutUint64(mem[0:], 3) // three "WQEs" of garbage
	h.db.Signal()
	time.Sleep(50 * time.Millisecond)
	binary.LittleEndian.PutUint64(mem[0:], 1<<40) // an impossible head
	h.db.Signal()

	// Its QP fails, and says so.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, _ := h.must(attach.OpQueryQP, func(w *attach.Writer) { w.U32(qp) })
		r.QPAttr()
		if driver.QPState(r.U8()) == driver.QPStateErr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hostile client's QP did not go to ERR")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Everyone else goes on: two attached clients exchange a message.
	exchange(t, addr)
}

// exchange runs one SEND between two clients attached to the daemon at addr.
func exchange(t *testing.T, addr netip.Addr) {
	t.Helper()
	var qps [2]*verbs.QP
	var cqs [2]*verbs.CQ
	var mrs [2]*verbs.MR
	var gid verbs.GID
	for i := range qps {
		dev, err := verbs.OpenSoft(verbs.SoftConfig{Name: "sw0", Addr: addr, Attach: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		gid, _ = dev.QueryGID(1, 0)
		pd, _ := dev.AllocPD()
		cqs[i], _ = dev.CreateCQ(16, nil)
		mrs[i], err = pd.RegMR(make([]byte, 1<<16), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if qps[i], err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cqs[i], RecvCQ: cqs[i],
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, qp := range qps {
		steps := []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: qps[1-i].QPN(), RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 1,
				AH: verbs.AHAttr{DGID: gid, Port: 1, HopLimit: 64}}, verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU |
				verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer},
			{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := qp.Modify(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	copy(mrs[0].Buf(), "hello")
	if err := qps[1].PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{mrs[1].SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := qps[0].PostSend(verbs.SendWR{ID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{mrs[0].SGE(0, 5)}}); err != nil {
		t.Fatal(err)
	}
	for i, cq := range cqs {
		var wc [1]verbs.WC
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := cq.Poll(wc[:])
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client %d: no completion", i)
			}
			time.Sleep(time.Millisecond)
		}
		if wc[0].Status != verbs.WCSuccess {
			t.Fatalf("client %d: %v", i, wc[0].Status)
		}
	}
	if string(mrs[1].Buf()[:5]) != "hello" {
		t.Fatalf("received %q", mrs[1].Buf()[:5])
	}
}
