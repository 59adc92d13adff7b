//go:build race

package congestion

// raceEnabled: the race detector makes the fabric models about ten times slower, and
// finds nothing in them (each runs on one goroutine), so they run a fifth of their
// virtual time under it. Their figures and assertions are for the full runs.
const raceEnabled = true
