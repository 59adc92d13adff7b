//go:build !race

package congestion

const raceEnabled = false
