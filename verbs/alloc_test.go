package verbs

import (
	"reflect"
	"testing"
)

// TestPostWithSGLLiteralAllocatesNothing: a work request written in place, its SGL a
// slice literal, costs no allocation to post, for RC WRITEs, receives and UD SENDs with
// an address handle. Go moves such a literal to the heap as soon as any callee might
// keep a pointer into it, so this holds only while no layer stores the caller's SGL.
func TestPostWithSGLLiteralAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	a, b := newHost(t, "127.10.0.61"), newHost(t, "127.10.0.62")
	p := newPair(t, a, b, QPTypeRC, defaultRC())
	src, dst := a.mr(t, 64, allAccess), b.mr(t, 64, allAccess)
	if n := testing.AllocsPerRun(50, func() {
		if err := p.qb.PostRecv(RecvWR{ID: 1, SGL: []SGE{dst.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostRecv: %v allocations per post", n)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := p.qa.PostSend(SendWR{ID: 2, Opcode: WRRDMAWrite, SGL: []SGE{src.SGE(0, 8)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostSend (RC WRITE): %v allocations per post", n)
	}
	const qkey = 0x11111111
	ua, ub := udQP(t, a, qkey), udQP(t, b, qkey)
	ah, err := a.pd.CreateAH(AHAttr{DGID: b.gid, Port: 1, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := ua.PostSend(SendWR{ID: 3, Opcode: WRSend, SGL: []SGE{src.SGE(0, 8)},
			AH: ah, RemoteQPN: ub.QPN(), RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("PostSend (UD SEND): %v allocations per post", n)
	}
}

// TestCloneWRsKeepEveryField: the copies handed to a provider behind the interface list
// the work request's fields one by one (to keep the caller's SGLs from escaping), so a
// field added to SendWR or RecvWR and not to the clones would silently read as zero
// there. Every field is set by reflection; the clone must equal the original in value
// (pointers are followed) and share no SGL array with it.
func TestCloneWRsKeepEveryField(t *testing.T) {
	var s SendWR
	setAll(t, reflect.ValueOf(&s).Elem())
	r := RecvWR{ID: 5, SGL: []SGE{{Addr: 1, Length: 2, LKey: 3}}}
	cs, cr := cloneSendWRs([]SendWR{s}), cloneRecvWRs([]RecvWR{r})
	if !reflect.DeepEqual(cs[0], s) {
		t.Errorf("cloneSendWRs dropped a field:\n got %+v\nwant %+v", cs[0], s)
	}
	if !reflect.DeepEqual(cr[0], r) {
		t.Errorf("cloneRecvWRs dropped a field:\n got %+v\nwant %+v", cr[0], r)
	}
	if &cs[0].SGL[0] == &s.SGL[0] || &cr[0].SGL[0] == &r.SGL[0] || cs[0].AH == s.AH || cs[0].Bind == s.Bind {
		t.Error("a clone shares the caller's SGL, AH or binding")
	}
}

// setAll gives every exported field of v (a struct, recursively) a value other than
// zero.
func setAll(t *testing.T, v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue // unexported: copied with its struct
		}
		switch f.Kind() {
		case reflect.Struct:
			setAll(t, f)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Int, reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			if e := f.Index(0); e.Kind() == reflect.Struct {
				setAll(t, e)
			}
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
			if e := f.Elem(); e.Kind() == reflect.Struct {
				setAll(t, e)
			}
		default:
			t.Fatalf("field %s of kind %v: teach setAll to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
}
