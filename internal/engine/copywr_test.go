package engine

import (
	"reflect"
	"testing"

	"github.com/goverbs/goverbs/verbs/driver"
)

// TestCopyWRKeepsEveryField: copyWR lists SendWR's fields one by one (to keep the
// caller's pointers out of the WQE), so a field added to SendWR and not to copyWR would
// silently read as zero. Every field is set here by reflection; all must survive but
// the three copyWR replaces on purpose.
func TestCopyWRKeepsEveryField(t *testing.T) {
	var wr driver.SendWR
	v := reflect.ValueOf(&wr).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Int, reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Interface: // the UD destination, an AHRef
			f.Set(reflect.ValueOf(&AH{}))
		default:
			t.Fatalf("field %s of kind %v: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	sgl := []driver.SGE{{Addr: 7}}
	got := copyWR(&wr, sgl)
	g := reflect.ValueOf(got)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		switch name {
		case "SGL":
			if !reflect.DeepEqual(got.SGL, sgl) {
				t.Errorf("SGL %v, want the WQE's own %v", got.SGL, sgl)
			}
		case "AH", "Bind":
			if !g.Field(i).IsNil() {
				t.Errorf("%s kept the caller's pointer", name)
			}
		default:
			if !reflect.DeepEqual(g.Field(i).Interface(), v.Field(i).Interface()) {
				t.Errorf("field %s not copied: %v, want %v", name, g.Field(i), v.Field(i))
			}
		}
	}
}
