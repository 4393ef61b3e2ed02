package main

import (
	"fmt"
	"math"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

// Collective benchmarks time each call on every rank, with a barrier
// between calls that is not timed (osu_coll's method): otherwise a rank
// that left the previous call early would be timed waiting for the others.
// Each rank's mean per-call time is gathered at rank 0, which reports the
// average over ranks, the fastest and the slowest rank.

func allreduce(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	k := size / 4
	s, r := buf.fsend[:k], buf.frecv[:k]
	return timeCollective(c, size, n, true, func() error { return mpi.Allreduce(c, s, r, mpi.Sum) })
}

func bcast(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	b := buf.send[:size]
	return timeCollective(c, size, n, true, func() error { return mpi.Bcast(c, b, 0) })
}

// barrier times back-to-back barriers: a separating barrier would be the
// operation under test itself.
func barrier(c *mpi.Comm, size int, n count, _ *buffers) (row, error) {
	return timeCollective(c, size, n, false, c.Barrier)
}

// alltoall sends size bytes to every rank and receives size from each.
func alltoall(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	total := size * c.Size()
	s, r := buf.send[:total], buf.recv[:total]
	return timeCollective(c, size, n, true, func() error { return mpi.Alltoall(c, s, r) })
}

// timeCollective runs call n.warmup+n.iters times, timing the last
// n.iters, and returns (at rank 0) the average, minimum and maximum over
// ranks of each rank's mean time per call in microseconds.
func timeCollective(c *mpi.Comm, size int, n count, separate bool, call func() error) (row, error) {
	var total time.Duration
	for i := range n.warmup + n.iters {
		t0 := time.Now()
		if err := call(); err != nil {
			return row{}, err
		}
		if i >= n.warmup {
			total += time.Since(t0)
		}
		if separate {
			if err := c.Barrier(); err != nil {
				return row{}, fmt.Errorf("barrier between calls: %w", err)
			}
		}
	}
	mine := []float64{total.Seconds() * 1e6 / float64(n.iters)}
	var all []float64
	if c.Rank() == 0 {
		all = make([]float64, c.Size())
	}
	if err := mpi.Gather(c, mine, all, 0); err != nil {
		return row{}, fmt.Errorf("gathering the ranks' times: %w", err)
	}
	if c.Rank() != 0 {
		return row{}, nil
	}
	r := row{size: size, min: math.Inf(1), max: math.Inf(-1), iters: n.iters}
	for _, us := range all {
		r.value += us / float64(len(all))
		r.min = math.Min(r.min, us)
		r.max = math.Max(r.max, us)
	}
	return r, nil
}
