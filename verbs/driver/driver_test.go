package driver_test

import (
	"errors"
	"go/parser"
	"go/token"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/testaddr"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// A provider that is not the software one, registered the way a libibverbs provider
// would be: verbs must list and open its devices, hand it the caller's work requests
// and completion array in place, and map its objects back in events.
type fakeProvider struct{}

func (fakeProvider) Devices() ([]driver.DeviceInfo, error) {
	return []driver.DeviceInfo{{Name: "fake0", NodeType: driver.NodeCA, Transport: "InfiniBand"}}, nil
}

func (fakeProvider) Open(name string) (driver.Device, error) {
	if name != "fake0" {
		return nil, driver.ErrNoDevice
	}
	fakeEvents = make(chan driver.AsyncEvent, 1)
	return &fakeDevice{events: fakeEvents}, nil
}

// fakeEvents is the event channel of the fake device opened last.
var fakeEvents chan driver.AsyncEvent

type fakeDevice struct{ events chan driver.AsyncEvent }

func (d *fakeDevice) Close() error                     { close(d.events); return nil }
func (*fakeDevice) Query() driver.DeviceAttr           { return driver.DeviceAttr{PhysPortCnt: 1} }
func (*fakeDevice) QueryPort(uint8) driver.PortAttr    { return driver.PortAttr{State: driver.PortActive} }
func (*fakeDevice) GIDTable(uint8) []driver.GIDEntry   { return []driver.GIDEntry{{Type: "RoCE v2"}} }
func (*fakeDevice) AllocPD() (driver.PD, error)        { return fakePD{}, nil }
func (*fakeDevice) Counters() driver.Counters          { return nil }
func (*fakeDevice) Progress() bool                     { return false }
func (d *fakeDevice) Events() <-chan driver.AsyncEvent { return d.events }
func (*fakeDevice) CreateCQ(depth int, notify func()) (driver.CQ, error) {
	return &fakeCQ{}, nil
}

type fakePD struct{}

func (fakePD) Close() error { return nil }
func (fakePD) RegMR(buf []byte, a driver.Access) (driver.MR, error) {
	return fakeMR{}, nil
}

// lastQP is the QP fakePD made last, for the test to inspect.
var lastQP *fakeQP

func (fakePD) CreateQP(init *driver.QPInit) (driver.QP, error) {
	lastQP = &fakeQP{cq: init.SendCQ.(*fakeCQ)}
	return lastQP, nil
}
func (fakePD) CreateSRQ(driver.SRQAttr) (driver.SRQ, error) { return nil, errors.ErrUnsupported }
func (fakePD) CreateAH(*driver.AHAttr) (driver.AH, error)   { return fakeAH{}, nil }
func (fakePD) AllocMW(driver.MWType) (driver.MW, error)     { return nil, errors.ErrUnsupported }

type fakeMR struct{}

func (fakeMR) Close() error { return nil }
func (fakeMR) LKey() uint32 { return 1 }
func (fakeMR) RKey() uint32 { return 2 }
func (fakeMR) Addr() uint64 { return 0x1000 }

type fakeAH struct{}

func (fakeAH) Close() error { return nil }

// fakeCQ completes every posted send at once.
type fakeCQ struct{ pending []driver.WC }

func (*fakeCQ) Close() error             { return nil }
func (*fakeCQ) Resize(int) error         { return nil }
func (*fakeCQ) Depth() int               { return 16 }
func (*fakeCQ) RequestNotify(bool) error { return nil }
func (c *fakeCQ) Poll(wcs []driver.WC) (int, error) {
	n := copy(wcs, c.pending)
	c.pending = c.pending[:copy(c.pending, c.pending[n:])]
	return n, nil
}

type fakeQP struct {
	cq    *fakeCQ
	bytes uint64
	udAH  int
}

func (*fakeQP) Close() error                                   { return nil }
func (*fakeQP) QPN() uint32                                    { return 7 }
func (*fakeQP) State() driver.QPState                          { return driver.QPStateReset }
func (*fakeQP) Modify(*driver.QPAttr, driver.QPAttrMask) error { return nil }
func (*fakeQP) Query() driver.QPAttr                           { return driver.QPAttr{} }
func (*fakeQP) Counters() driver.QPCounters                    { return driver.QPCounters{} }
func (*fakeQP) PostRecv(wrs []driver.RecvWR) error             { return nil }
func (*fakeQP) BindMW(driver.MW, uint64, driver.SendFlags, driver.MWBind) (uint32, error) {
	return 0, errors.ErrUnsupported
}
func (*fakeQP) AttachMcast(driver.GID, uint16) error { return errors.ErrUnsupported }
func (*fakeQP) DetachMcast(driver.GID, uint16) error { return errors.ErrUnsupported }

// PostSend reads the requests in place, as a provider copies them into its WQEs.
func (q *fakeQP) PostSend(wrs []driver.SendWR) error {
	for i := range wrs {
		for _, s := range wrs[i].SGL {
			q.bytes += uint64(s.Length)
		}
		if wrs[i].AH != nil {
			if _, ok := wrs[i].AH.DriverAH().(fakeAH); ok {
				q.udAH++
			}
		}
		if len(q.cq.pending) < cap(q.cq.pending) {
			q.cq.pending = append(q.cq.pending, driver.WC{ID: wrs[i].ID, Opcode: driver.WCSend})
		}
	}
	return nil
}

func init() { driver.Register("fake", fakeProvider{}) }

func TestRegistryListsProvidersSorted(t *testing.T) {
	if got := driver.Providers(); !slices.Contains(got, "fake") || !slices.Contains(got, "soft") || !slices.IsSorted(got) {
		t.Fatalf("Providers() = %v, want a sorted list with fake and soft", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second Register under one name did not panic")
		}
	}()
	driver.Register("fake", fakeProvider{})
}

func TestVerbsUsesASecondProvider(t *testing.T) {
	list, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(d verbs.DeviceInfo) bool { return d.Name == "fake0" })
	if i < 0 || list[i].Provider != "fake" {
		t.Fatalf("Devices() = %+v, want fake0 from provider fake", list)
	}
	if _, ok := list[i].SoftConfig(); ok {
		t.Error("a fake device has a software configuration")
	}
	dev, err := verbs.Open("fake0")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(verbs.AHAttr{DGID: verbs.GID{15: 1}, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	fq := lastQP
	fq.cq.pending = make([]driver.WC, 0, 4)

	// The caller's request, SGL literal and completion array stay on its stack.
	allocs := testing.AllocsPerRun(100, func() {
		if err := qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: 0x1000, Length: 8, LKey: 1}},
			AH: ah}); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostRecv(verbs.RecvWR{ID: 10, SGL: []verbs.SGE{{Addr: 0x1000, Length: 8, LKey: 1}}}); err != nil {
			t.Fatal(err)
		}
		var wcs [4]verbs.WC
		if n, err := cq.Poll(wcs[:]); err != nil || n != 1 || wcs[0].ID != 9 {
			t.Fatalf("Poll = %d, %v, %+v", n, err, wcs[0])
		}
	})
	if allocs != 0 {
		t.Errorf("post and poll through a second provider: %v allocations, want 0", allocs)
	}
	if fq.bytes == 0 || fq.udAH == 0 {
		t.Errorf("the provider saw %d bytes and %d address handles of its own", fq.bytes, fq.udAH)
	}

	// An event naming the provider's QP reaches the program naming the program's QP.
	fakeEvents <- driver.AsyncEvent{Type: driver.EventCommEst, QP: fq}
	select {
	case ev := <-dev.Events():
		if ev.Type != verbs.EventCommEst || ev.QP != qp {
			t.Errorf("event %v for QP %p, want communication established for %p", ev, ev.QP, qp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}

// TestDriverIsALeaf: providers and verbs both import this package, so it imports nothing
// of goverbs but the wire format (its MTU type).
func TestDriverIsALeaf(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(path, "github.com/goverbs/goverbs/") && path != "github.com/goverbs/goverbs/wire" {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}

// A provider without the GSI capability: OpenGSI says so, and the software device,
// which has it, gives it to one holder at a time.
func TestGSICapability(t *testing.T) {
	dev, err := verbs.Open("fake0")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := dev.OpenGSI(); !errors.Is(err, verbs.ErrNoGSI) {
		t.Fatalf("OpenGSI on a provider without QP1 access: %v", err)
	}
	soft := testaddr.Open(t, testaddr.Verbs, func(a netip.Addr) (*verbs.Device, error) {
		return verbs.OpenSoft(verbs.SoftConfig{Addr: a})
	})
	defer soft.Close()
	g, err := soft.OpenGSI()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := soft.OpenGSI(); !errors.Is(err, verbs.ErrGSIBusy) {
		t.Fatalf("second OpenGSI: %v", err)
	}
	g.Close()
	g, err = soft.OpenGSI()
	if err != nil {
		t.Fatalf("OpenGSI after Close: %v", err)
	}
	g.Close()
}
