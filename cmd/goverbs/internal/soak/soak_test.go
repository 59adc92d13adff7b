package soak

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
)

// The checks catch what they are for: memory changed behind the stream's back shows up
// as the first READ or atomic that sees it.
func TestChecksCatchTampering(t *testing.T) {
	cases := []struct {
		name, want string
		tamper     func(s *stream)
	}{
		{"a READ source byte", "READ of", func(s *stream) {
			if s.posted >= 100 {
				for i := range s.readSrc.buf() {
					s.readSrc.buf()[i]++
				}
				s.tamper = nil
			}
		}},
		{"the FETCH_AND_ADD word", "FETCH_AND_ADD returned", func(s *stream) {
			if s.posted >= 100 {
				s.words.buf()[0]++
				s.tamper = nil
			}
		}},
		{"a guard zone", "guard zone", func(s *stream) {
			if s.posted >= 100 {
				s.sink.all[0]++
				s.tamper = nil
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, err := run(context.Background(), Config{Messages: 2000, Seed: 1, Faults: Presets[0].Faults}, c.tamper)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("tampering with %s: %v", c.name, err)
				}
			})
		})
	}
}
