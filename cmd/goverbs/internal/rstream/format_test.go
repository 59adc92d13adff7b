package rstream

import "testing"

// TestRstreamNumbers: the size and count columns are librdmacm's size_str and cnt_str.
func TestRstreamNumbers(t *testing.T) {
	for n, want := range map[int64]string{64: "64", 1000: "1000", 1024: "1k", 1536: "1.5k",
		12288: "12k", 98304: "96k", 1 << 20: "1m", 6 << 20: "6m", 12800000: "12m", 3 << 29: "1.5g"} {
		if got := sizeStr(n); got != want {
			t.Errorf("sizeStr(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{1: "1", 999: "999", 1000: "1k", 100000: "100k", 2500000: "2m", 3e9: "3b"} {
		if got := cntStr(n); got != want {
			t.Errorf("cntStr(%d) = %q, want %q", n, got, want)
		}
	}
	if n := len(testSizes); n != 33 || testSizes[n-1].size != 6<<20 {
		t.Errorf("%d sizes, the last %d", n, testSizes[n-1].size)
	}
}
