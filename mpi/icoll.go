package mpi

// icollState is a world's nonblocking collectives in flight.
type icollState struct{}
