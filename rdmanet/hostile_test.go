package rdmanet

import (
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// A peer that breaks the protocol (credits for what was never sent, data past the
// room it was given, a message without immediate) fails the connection with a clear
// error; nothing panics and no call stays blocked.
func TestProtocolViolationsFailTheConnection(t *testing.T) {
	for name, wr := range map[string]func(peer *Conn) verbs.SendWR{
		"credit for unsent messages": func(*Conn) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSendWithImm, Imm: creditImm(5, 0)}
		},
		"credit for unsent bytes": func(*Conn) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSendWithImm, Imm: creditImm(0, 100)}
		},
		"data by SEND": func(*Conn) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSendWithImm, Imm: dataImm(1)}
		},
		"data length not the WRITE's": func(p *Conn) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: dataImm(7),
				SGL: []verbs.SGE{p.ep.stage.SGE(0, 8)}, RemoteAddr: p.peer.ringAddr, RKey: p.peer.ringRKey}
		},
		"no immediate": func(*Conn) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend}
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := pair(t)
			// b turns hostile: it posts to its QP behind its Conn's back.
			b.mu.Lock()
			w := wr(b)
			w.ID, w.Flags = wrCtrl, verbs.SendSignaled
			err := b.ep.qp.PostSend(w)
			if err == nil {
				b.ctrls++
				b.posted++
			}
			b.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			a.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = a.Read(make([]byte, 10))
			if !errors.Is(err, errProtocol) {
				t.Fatalf("Read: %v, want a protocol violation", err)
			}
			if _, err := a.Write([]byte("x")); !errors.Is(err, errProtocol) {
				t.Fatalf("Write: %v, want a protocol violation", err)
			}
		})
	}
}
