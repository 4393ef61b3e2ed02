package mpi

import (
	"fmt"
	"testing"
)

// TestWinExclusiveCounter: every rank increments a counter in rank
// 0's window (and one in a second window at the last rank) by Get,
// Flush, Put under an exclusive lock, many times; the locks exclude each
// other, so no increment is lost.
func TestWinExclusiveCounter(t *testing.T) {
	runWinCases(t, exclCounterCase, []int{1, 2, 3, 4})
}

func exclCounterCase(c *Comm) error {
	const iters = 40
	p, me := c.Size(), c.Rank()
	a := make([]int64, 3)
	b := make([]int64, 5)
	wa, err := NewWin(c, a)
	if err != nil {
		return err
	}
	wb, err := NewWin(c, b)
	if err != nil {
		return err
	}
	ta, tb := 0, p-1
	for it := 0; it < iters; it++ {
		if err := wa.Lock(ta, true); err != nil {
			return err
		}
		if err := wb.Lock(tb, true); err != nil {
			return err
		}
		va, vb := make([]int64, 1), make([]int64, 1)
		if err := wa.Get(va, ta, 1); err != nil {
			return err
		}
		if err := wb.Get(vb, tb, 3); err != nil {
			return err
		}
		if err := wa.Flush(ta); err != nil {
			return err
		}
		if err := wb.Flush(tb); err != nil {
			return err
		}
		va[0]++
		vb[0] += 2
		if err := wa.Put(va, ta, 1); err != nil {
			return err
		}
		if err := wb.Put(vb, tb, 3); err != nil {
			return err
		}
		if err := wa.Unlock(ta); err != nil {
			return err
		}
		if err := wb.Unlock(tb); err != nil {
			return err
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	// read back under a shared lock
	va, vb := make([]int64, 1), make([]int64, 1)
	if err := wa.Lock(ta, false); err != nil {
		return err
	}
	if err := wa.Get(va, ta, 1); err != nil {
		return err
	}
	if err := wa.Unlock(ta); err != nil {
		return err
	}
	if err := wb.Lock(tb, false); err != nil {
		return err
	}
	if err := wb.Get(vb, tb, 3); err != nil {
		return err
	}
	if err := wb.Unlock(tb); err != nil {
		return err
	}
	if va[0] != int64(p*iters) || vb[0] != int64(2*p*iters) {
		return fmt.Errorf("rank %d: counters %d, %d, want %d, %d", me, va[0], vb[0], p*iters, 2*p*iters)
	}
	if err := wa.Free(); err != nil {
		return err
	}
	return wb.Free()
}
