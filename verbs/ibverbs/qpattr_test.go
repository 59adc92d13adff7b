//go:build ibverbs

package ibverbs

import (
	"testing"

	"github.com/goverbs/goverbs/verbs/driver"
)

// TestQPAttrRoundTrip: what Modify puts into a struct ibv_qp_attr, QPAttrFromC reads
// back unchanged, so attributes from rdma_init_qp_attr reach the device as librdmacm
// set them. Every field holds a distinct value so that a swapped pair shows.
func TestQPAttrRoundTrip(t *testing.T) {
	in := driver.QPAttr{
		State: driver.QPStateRTR, CurState: driver.QPStateInit, PathMTU: driver.MTU1024,
		QKey: 0x01234567, RQPSN: 0xabcdef, SQPSN: 0x123456, DestQPN: 0x000123,
		AccessFlags: driver.AccessRemoteWrite | driver.AccessRemoteRead,
		Cap:         driver.QPCap{MaxSendWR: 11, MaxRecvWR: 12, MaxSendSGE: 13, MaxRecvSGE: 14, MaxInline: 15},
		AH: driver.AHAttr{DGID: driver.GID{0: 0xfe, 15: 0x02}, SGIDIndex: 1, HopLimit: 64,
			TrafficClass: 3, FlowLabel: 0x12345, SL: 2, Port: 1},
		PKeyIndex: 0, Port: 1, MinRNRTimer: 12, Timeout: 19, RetryCnt: 7, RNRRetry: 6,
		MaxRdAtomic: 4, MaxDestRdAtomic: 5,
	}
	a := qpAttrToC(&in, driver.QPAttrAV, 1)
	if got := qpAttrFromC(&a); got != in {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, in)
	}
}
