//go:build ibverbs && race

package ibverbs_test

// The race detector allocates on its own: the allocation test skips under it.
const raceEnabled = true
