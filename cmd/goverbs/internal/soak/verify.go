package soak

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// The run loop and the checks: every completion against the stream's model, and at the
// end the guard zones and the QPs' states.

var errStall = errors.New("soak: stalled")

func (s *stream) run(ctx context.Context) error {
	n := s.cfg.Messages
	wcs := make([]verbs.WC, 64)
	lastProgress, lastDone := time.Now(), 0
	for s.done < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		for s.posted < n && s.posted-s.done < s.cfg.Depth {
			if err := s.post(); err != nil {
				return err
			}
		}
		got := 0
		// Receiver side.
		k, err := s.cqB.Poll(wcs)
		if err != nil {
			return err
		}
		got += k
		for _, wc := range wcs[:k] {
			if err := s.receiverCompletion(wc); err != nil {
				return err
			}
		}
		// Requester side.
		k, err = s.cqA.Poll(wcs)
		if err != nil {
			return err
		}
		got += k
		for _, wc := range wcs[:k] {
			if err := s.requesterCompletion(wc); err != nil {
				return err
			}
			if s.cfg.Progress != nil && s.done%s.cfg.ProgressEvery == 0 {
				s.cfg.Progress(s.done)
			}
		}
		if s.done != lastDone {
			lastProgress, lastDone = time.Now(), s.done
		} else if time.Since(lastProgress) > s.cfg.Stall {
			return fmt.Errorf("%w: %d of %d messages done, nothing for %v", errStall, s.done, n, s.cfg.Stall)
		}
		if got == 0 {
			time.Sleep(50 * time.Microsecond) // under synctest: lets the network deliver
		}
	}
	return nil
}

func (s *stream) requesterCompletion(wc verbs.WC) error {
	i := int(wc.ID)
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("message %d (%v): completion %v (vendor %#x)", i, s.msgs[i].kind, wc.Status, wc.VendorErr)
	}
	if i != s.done {
		return fmt.Errorf("requester completion for message %d, want %d (out of order, lost or duplicated)", i, s.done)
	}
	m := &s.msgs[i]
	slot := (i % slots) * s.slotSize
	switch m.kind {
	case Write:
		// Completion of an RC WRITE means the bytes are in place at the responder.
		want := s.src.Buf()[slot : slot+m.size]
		if !bytes.Equal(s.sink.buf()[slot:slot+m.size], want) {
			return fmt.Errorf("message %d: RDMA WRITE of %d bytes: target differs", i, m.size)
		}
	case Read:
		if wc.ByteLen != uint32(m.size) {
			return fmt.Errorf("message %d: READ completion byte_len %d, want %d", i, wc.ByteLen, m.size)
		}
		for k, b := range s.readDst.Buf()[slot : slot+m.size] {
			if b != readByte(slot+k) {
				return fmt.Errorf("message %d: READ of %d bytes: byte %d is %#x, want %#x", i, m.size, k, b, readByte(slot+k))
			}
		}
	case FetchAdd, CmpSwap:
		got := binary.NativeEndian.Uint64(s.atomRes.Buf()[8*(i%slots):])
		if got != m.want {
			return fmt.Errorf("message %d: %v returned %#x, want %#x (executed twice, lost or out of order)", i, m.kind, got, m.want)
		}
	}
	wantOp := map[Kind]verbs.WCOpcode{Send: verbs.WCSend, SendImm: verbs.WCSend, Write: verbs.WCRDMAWrite, WriteImm: verbs.WCRDMAWrite,
		Read: verbs.WCRDMARead, FetchAdd: verbs.WCFetchAdd, CmpSwap: verbs.WCCompSwap}[m.kind]
	if wc.Opcode != wantOp {
		return fmt.Errorf("message %d: completion opcode %v, want %v", i, wc.Opcode, wantOp)
	}
	s.byKind[m.kind]++
	s.done++
	return nil
}

func (s *stream) receiverCompletion(wc verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("receive completion %d: %v", wc.ID, wc.Status)
	}
	if s.recvDone >= len(s.consumers) {
		return fmt.Errorf("receive completion %+v for no message (duplicated delivery?)", wc)
	}
	if wc.ID != uint64(s.recvDone) {
		return fmt.Errorf("receive completion for WQE %d, want %d", wc.ID, s.recvDone)
	}
	i := s.consumers[s.recvDone]
	m := &s.msgs[i]
	slot := (i % slots) * s.slotSize
	want := s.src.Buf()[slot : slot+m.size]
	var got []byte
	switch m.kind {
	case Send, SendImm:
		if wc.Opcode != verbs.WCRecv {
			return fmt.Errorf("message %d (%v): receive opcode %v", i, m.kind, wc.Opcode)
		}
		rs := (int(wc.ID) % slots) * s.slotSize
		got = s.recvBuf.buf()[rs : rs+int(wc.ByteLen)]
	case WriteImm:
		if wc.Opcode != verbs.WCRecvRDMAWithImm {
			return fmt.Errorf("message %d (%v): receive opcode %v", i, m.kind, wc.Opcode)
		}
		got = s.sink.buf()[slot : slot+int(wc.ByteLen)]
	}
	hasImm := wc.Flags&verbs.WCWithImm != 0
	if hasImm != (m.kind != Send) || hasImm && wc.Imm != uint32(i)^0xa5a5a5a5 {
		return fmt.Errorf("message %d (%v): immediate %v %#x", i, m.kind, hasImm, wc.Imm)
	}
	if int(wc.ByteLen) != m.size || !bytes.Equal(got, want) {
		return fmt.Errorf("message %d (%v): received %d bytes, want %d, equal %v", i, m.kind, wc.ByteLen, m.size, bytes.Equal(got, want))
	}
	s.recvDone++
	if s.recvPosted < len(s.consumers)+recvAhead {
		return s.postRecv()
	}
	return nil
}

func (s *stream) finalChecks() error {
	// Every receive the stream earned has arrived, and no more come.
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(time.Second)
	for s.recvDone < len(s.consumers) {
		k, err := s.cqB.Poll(wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if err := s.receiverCompletion(wc); err != nil {
				return err
			}
		}
		if k == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d receive completions arrived", s.recvDone, len(s.consumers))
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	time.Sleep(10 * time.Millisecond) // anything duplicated would arrive now
	for _, cq := range []*verbs.CQ{s.cqA, s.cqB} {
		if k, _ := cq.Poll(wcs); k != 0 {
			return fmt.Errorf("extra completion after the stream: %+v", wcs[0])
		}
	}
	if got := binary.NativeEndian.Uint64(s.words.buf()[0:]); got != s.faModel {
		return fmt.Errorf("FETCH_AND_ADD word %#x, want %#x", got, s.faModel)
	}
	if got := binary.NativeEndian.Uint64(s.words.buf()[8:]); got != s.casModel {
		return fmt.Errorf("CMP_AND_SWP word %#x, want %#x", got, s.casModel)
	}
	for _, g := range []*guarded{s.recvBuf, s.sink, s.readSrc, s.words} {
		if !g.guardsIntact() {
			return errors.New("a guard zone around a remote buffer changed")
		}
	}
	if s.qa.State() != verbs.QPStateRTS || s.qb.State() != verbs.QPStateRTS {
		return fmt.Errorf("QPs in %v and %v after the stream", s.qa.State(), s.qb.State())
	}
	return nil
}
