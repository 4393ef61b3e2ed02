package mpi

// winState is a world's one-sided windows.
type winState struct{}
