package soak_test

import (
	"context"
	"flag"
	"testing"
	"testing/synctest"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/soak"
)

// The soak (issue 6): a long mixed RC stream — SEND, SEND with immediate, WRITE, WRITE
// with immediate, READ, FETCH_AND_ADD, CMP_AND_SWP, 0 to 4 MTUs + 7 bytes, some inline,
// some with two SGEs — through the simulated network with each fault alone and all
// combined (soak.Presets), every byte and every completion verified. In fake time under
// synctest. A long run:
//
//	go test ./cmd/goverbs/internal/soak -run 'TestSoak/all' -v -args -soak.n=1000000
//
// or `goverbs soak -n 1000000` in real time.

var soakN = flag.Int("soak.n", 0, "messages per soak variant (0: the CI default)")

func TestSoak(t *testing.T) {
	for i, v := range soak.Presets {
		t.Run(v.Name, func(t *testing.T) {
			n := 2000
			if v.Name == "all" {
				n = 5000
			}
			if testing.Short() {
				n /= 10
			}
			if *soakN > 0 {
				n = *soakN
			}
			synctest.Test(t, func(t *testing.T) {
				res, err := soak.Run(context.Background(), soak.Config{Messages: n, Seed: uint64(100 + i), Faults: v.Faults})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s\n%s", v.Name, res.Format())
				if v.Counter != "" && res.Counter(v.Counter) == 0 {
					t.Errorf("%s never rose: the fault was not exercised", v.Counter)
				}
			})
		})
	}
}
