//go:build race

package lapi

// raceEnabled: built with -race, whose instrumentation changes allocation
// counts and timing, so allocation assertions skip.
const raceEnabled = true
