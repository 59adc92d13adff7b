//go:build linux

package server_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/attach"
)

// TestEngineStatHostile: ENGINE_STAT by hand, with a client that answers goverbs stat
// with lines that are not its to give, then not at all, then late. The daemon refuses
// the wrong descriptors, copies only the engine's line and QPs of the client's range
// (with the pid it knows), says when the client did not answer, and takes a late
// answer for no later request.
func TestEngineStatHostile(t *testing.T) {
	_, addr := daemon(t)
	r := dialRaw(t, addr)
	pair := func(typ int) [2]int {
		fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		return fds
	}
	sp := pair(unix.SOCK_SEQPACKET)
	if _, _, errno := r.call(attach.OpEngineStat, nil, sp[1]); errno != int32(unix.EINVAL) {
		t.Fatalf("ENGINE_STAT before ENGINE: errno %d, want EINVAL", errno)
	}
	rep, fds, errno := r.call(attach.OpEngine, func(w *attach.Writer) { w.U32(0) })
	if errno != 0 || len(fds) != 1 {
		t.Fatalf("ENGINE: errno %d, %d fds", errno, len(fds))
	}
	defer unix.Close(fds[0])
	first := rep.U32()
	if _, _, errno := r.call(attach.OpEngineStat, nil, pair(unix.SOCK_STREAM)[1]); errno != int32(unix.EINVAL) {
		t.Fatalf("ENGINE_STAT with a stream socket: errno %d, want EINVAL", errno)
	}
	if _, _, errno := r.call(attach.OpEngineStat, nil); errno != int32(unix.EINVAL) {
		t.Fatalf("ENGINE_STAT with no descriptor: errno %d, want EINVAL", errno)
	}
	if _, _, errno := r.call(attach.OpEngineStat, nil, sp[1]); errno != 0 {
		t.Fatalf("ENGINE_STAT: errno %d", errno)
	}
	if _, _, errno := r.call(attach.OpEngineStat, nil, pair(unix.SOCK_SEQPACKET)[1]); errno != int32(unix.EINVAL) {
		t.Fatalf("ENGINE_STAT twice: errno %d, want EINVAL", errno)
	}

	// The client's end: answer request i with answers[i] (nil: no answer).
	own := sp[0]
	reply := func(seq uint64, last bool, text string) {
		msg := binary.LittleEndian.AppendUint64(nil, seq)
		msg = append(msg, map[bool]byte{false: 0, true: 1}[last])
		if _, err := unix.Write(own, append(msg, text...)); err != nil {
			t.Error(err)
		}
	}
	pid := os.Getpid()
	good := fmt.Sprintf("qp %#x tx_pkts 7 rx_pkts 3\n", first+1)
	answers := []func(seq uint64){
		func(seq uint64) {
			reply(seq, false, "engine sent_pkts 4 rcvd_pkts 2\nclient pid 1 evil pd 9\n")
			reply(seq, false, "qp 0x11 tx_pkts 5\n"+good+fmt.Sprintf("qp %#x tx_pkts x\n", first+2))
			reply(seq, true, "qp 0x1 \x1b[2J tx_pkts 1\n")
		},
		nil,
		func(seq uint64) {
			reply(seq-1, true, fmt.Sprintf("qp %#x tx_pkts 99 rx_pkts 99\n", first+3)) // late, for the last request
			reply(seq, true, good)
		},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 64)
		for _, a := range answers {
			n, err := unix.Read(own, b)
			if err != nil || n != 8 {
				t.Errorf("request: %d bytes, %v", n, err)
				return
			}
			if a != nil {
				a(binary.LittleEndian.Uint64(b))
			}
		}
	}()

	st := statOf(t, addr)
	for _, want := range []string{
		fmt.Sprintf("\nclient pid %d hostile own_engine qpn %#06x-%#06x\n", pid, first, first|0xffff),
		fmt.Sprintf("\nengine pid %d sent_pkts 4 rcvd_pkts 2\n", pid),
		fmt.Sprintf("\nqp %#x pid %d tx_pkts 7 rx_pkts 3\n", first+1, pid),
		fmt.Sprintf("\n# pid %d: 4 lines of the client's answer dropped", pid),
	} {
		if !strings.Contains(st, want) {
			t.Errorf("stat lacks %q", want)
		}
	}
	if strings.Contains(st, "evil") || strings.Contains(st, "\x1b") || strings.Contains(st, "qp 0x11 ") {
		t.Errorf("stat copied a line the client may not give")
	}
	if t.Failed() {
		t.Fatalf("stat:\n%s", st)
	}
	start := time.Now()
	st = statOf(t, addr)
	if !strings.Contains(st, fmt.Sprintf("\n# pid %d: the client's engine did not answer within 200ms\n", pid)) {
		t.Fatalf("stat of a client that does not answer:\n%s", st)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stat took %v with a client that does not answer", d)
	}
	st = statOf(t, addr)
	if !strings.Contains(st, fmt.Sprintf("\nqp %#x pid %d tx_pkts 7 rx_pkts 3\n", first+1, pid)) || strings.Contains(st, "tx_pkts 99") {
		t.Fatalf("stat after a late answer:\n%s", st)
	}
	<-done
}
