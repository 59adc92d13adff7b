//go:build ibverbs

package ibverbs

/*
#include <fcntl.h>
#include <unistd.h>
#include "shim.h"

// gv_nonblock_dup makes fd non-blocking (libibverbs' own reads then return EAGAIN when
// nothing is there) and returns a duplicate for Go's netpoller to own and close.
static int gv_nonblock_dup(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}
*/
import "C"

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/goverbs/goverbs/verbs/driver"
)

// pollable returns an *os.File in Go's netpoller that reads the same open file as fd.
func pollable(fd C.int, name string) (*os.File, error) {
	dup, err := C.gv_nonblock_dup(fd)
	if dup < 0 {
		return nil, ibvErr("fcntl "+name, err)
	}
	return os.NewFile(uintptr(dup), name), nil
}

// startPumps creates the completion channel and starts the two goroutines that read it
// and the async event queue. They wait in the netpoller, holding no thread.
func (d *device) startPumps() error {
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return ibvErr("ibv_create_comp_channel", err)
	}
	d.ch = ch
	if d.chFile, err = pollable(ch.fd, d.name+" completion channel"); err != nil {
		return err
	}
	if d.asyncFile, err = pollable(d.ctx.async_fd, d.name+" async events"); err != nil {
		d.chFile.Close()
		return err
	}
	d.pumps.Add(2)
	go d.pump(d.chFile, d.completionEvents)
	go d.pump(d.asyncFile, d.asyncEvents)
	return nil
}

// pump calls drain each time f is readable, until f is closed.
func (d *device) pump(f *os.File, drain func()) {
	defer d.pumps.Done()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// drain reads until EAGAIN; returning false waits for the next readiness.
	rc.Read(func(uintptr) bool { drain(); return false })
}

func (d *device) stopPumps() {
	d.chFile.Close() // wakes the pumps' waits with an error
	d.asyncFile.Close()
	d.pumps.Wait()
	close(d.events)
}

// completionEvents turns each event on the channel into its CQ's notification
// (ibv_get_cq_event, ibv_ack_cq_events).
func (d *device) completionEvents() {
	for {
		var c *C.struct_ibv_cq
		var ctx unsafe.Pointer
		if C.ibv_get_cq_event(d.ch, &c, &ctx) != 0 {
			return // EAGAIN: drained
		}
		d.mu.Lock()
		o := d.cqs[unsafe.Pointer(c)]
		d.mu.Unlock()
		C.ibv_ack_cq_events(c, 1)
		if o != nil && o.notify != nil {
			o.notify()
		}
	}
}

// asyncEvents reads the device's asynchronous events, names the objects they concern
// and delivers them, dropping (and counting) what finds the channel full: the reads must
// go on, since destroying an object waits until its events are acknowledged.
func (d *device) asyncEvents() {
	for {
		var ev C.struct_ibv_async_event
		var obj unsafe.Pointer
		var port C.int
		if C.gv_async_event(d.ctx, &ev, &obj, &port) != 0 {
			return
		}
		out := driver.AsyncEvent{Type: driver.EventType(ev.event_type), Port: uint8(port)}
		d.mu.Lock()
		if c := d.cqs[obj]; c != nil {
			out.CQ = c
			if out.Type == driver.EventCQErr {
				c.overrun.Store(true)
			}
		}
		if q := d.qps[obj]; q != nil {
			out.QP = q
		}
		if s := d.srqs[obj]; s != nil {
			out.SRQ = s
		}
		d.mu.Unlock()
		C.ibv_ack_async_event(&ev)
		select {
		case d.events <- out:
		default:
			d.lost.Add(1)
		}
	}
}

// Counters reads the kernel's statistics of every port from sysfs: hw_counters (the
// provider's own: for rxe sent_pkts, rcvd_pkts, duplicate_request, rcvd_rnr_err, …) and
// the IB port counters. Ports after the first carry a "portN." prefix.
func (d *device) Counters() driver.Counters {
	var out driver.Counters
	for p := 1; p <= int(d.attr.PhysPortCnt); p++ {
		prefix := ""
		if p > 1 {
			prefix = "port" + strconv.Itoa(p) + "."
		}
		for _, dir := range []string{"hw_counters", "counters"} {
			base := filepath.Join(d.path, "ports", strconv.Itoa(p), dir)
			ents, err := os.ReadDir(base)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if e.IsDir() || e.Name() == "lifespan" {
					continue
				}
				b, err := os.ReadFile(filepath.Join(base, e.Name()))
				if err != nil {
					continue
				}
				v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
				if err != nil {
					continue
				}
				out = append(out, driver.Counter{Name: prefix + e.Name(), Value: v})
			}
		}
	}
	return append(out, driver.Counter{Name: "async_events_lost", Value: d.lost.Load()})
}
