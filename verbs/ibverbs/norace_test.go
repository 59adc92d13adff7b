//go:build ibverbs && !race

package ibverbs_test

const raceEnabled = false
