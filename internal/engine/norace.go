//go:build !race

package engine

func raceReleaseWire() {}
func raceAcquireWire() {}
