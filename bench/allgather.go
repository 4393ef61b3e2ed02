package main

import "github.com/weft-hpc/weft/mpi"

// allgather sends size bytes from every rank to every rank
// (osu_allgather): each rank's send is size bytes, its recv Size() blocks.
func allgather(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	s, r := buf.send[:size], buf.recv[:size*c.Size()]
	return timeCollective(c, size, n, true, func() error { return mpi.Allgather(c, s, r) })
}
