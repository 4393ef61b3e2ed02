package main

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

// iallreduce is osu_iallreduce's method: first the pure time of an
// Iallreduce and its Wait; then, for as long again, the rank computes
// between the call and the Wait, without calling MPI. Overlap is the
// share of the pure time hidden behind the computation: 100 - 100 ×
// (overall - compute) / pure, at least 0 (OSU's formula, each time the
// average over ranks). A runtime that only progresses inside MPI calls
// hides none of it.
func iallreduce(c *mpi.Comm, size int, n count, buf *buffers) (row, error) {
	k := size / 4
	s, r := buf.fsend[:k], buf.frecv[:k]
	call := func() error {
		q, err := mpi.Iallreduce(c, s, r, mpi.Sum)
		if err != nil {
			return err
		}
		_, err = q.Wait()
		return err
	}
	var pure time.Duration
	for i := range n.warmup + n.iters {
		t0 := time.Now()
		if err := call(); err != nil {
			return row{}, err
		}
		if i >= n.warmup {
			pure += time.Since(t0)
		}
		if err := c.Barrier(); err != nil {
			return row{}, fmt.Errorf("barrier between calls: %w", err)
		}
	}
	target := pure / time.Duration(n.iters)
	var overall, compute time.Duration
	for i := range n.warmup + n.iters {
		t0 := time.Now()
		q, err := mpi.Iallreduce(c, s, r, mpi.Sum)
		if err != nil {
			return row{}, err
		}
		t1 := time.Now()
		busyCompute(target)
		t2 := time.Now()
		if _, err := q.Wait(); err != nil {
			return row{}, err
		}
		if i >= n.warmup {
			overall += time.Since(t0)
			compute += t2.Sub(t1)
		}
		if err := c.Barrier(); err != nil {
			return row{}, fmt.Errorf("barrier between calls: %w", err)
		}
	}
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(n.iters) }
	mine := []float64{us(overall), us(compute), us(pure)}
	var all []float64
	if c.Rank() == 0 {
		all = make([]float64, 3*c.Size())
	}
	if err := mpi.Gather(c, mine, all, 0); err != nil {
		return row{}, fmt.Errorf("gathering the ranks' times: %w", err)
	}
	if c.Rank() != 0 {
		return row{}, nil
	}
	var avg [3]float64
	for i, v := range all {
		avg[i%3] += v / float64(c.Size())
	}
	return overlapRow(size, n.iters, avg[0], avg[1], avg[2]), nil
}

// overlapRow is a row of an overlap benchmark: value holds the overlap
// (%), min the overall time, max the computation's, pure the pure
// communication's (us).
func overlapRow(size, iters int, overall, compute, pure float64) row {
	ov := 0.0
	if pure > 0 {
		ov = max(0, 100-100*(overall-compute)/pure)
	}
	return row{size: size, value: ov, min: overall, max: compute, pure: pure, iters: iters}
}

// busyCompute computes for d without calling MPI, as OSU's dummy compute
// does (floating-point work, the clock read every few hundred steps).
func busyCompute(d time.Duration) {
	end := time.Now().Add(d)
	x := 1.0
	for time.Now().Before(end) {
		for range 256 {
			x = x*1.0000001 + 1e-9
		}
	}
	sink.Store(math.Float64bits(x))
}

// sink keeps busyCompute's result alive. It is atomic: mpi.Run's ranks
// share the process, and compute at once.
var sink atomic.Uint64
