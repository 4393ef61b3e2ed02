//go:build race

package mpi

// raceEnabled: built with -race, whose instrumentation changes allocation
// counts and timing: sync.Pool drops items at random,
// so allocation assertions skip.
const raceEnabled = true
