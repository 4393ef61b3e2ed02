package mpi

import (
	"fmt"
	"testing"
)

// TestWinSharedExclusive: writers update a pair (a, b) at rank 0
// under exclusive locks, readers read it under shared locks; a reader
// never sees a != b, and the last value is the number of updates.
func TestWinSharedExclusive(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	runWinCases(t, sharedExclCase, []int{2, 3, 4})
}

func sharedExclCase(c *Comm) error {
	const iters = 60
	p, me := c.Size(), c.Rank()
	base := make([]int64, 9)
	win, err := NewWin(c, base)
	if err != nil {
		return err
	}
	writers := (p + 1) / 2
	for it := 0; it < iters; it++ {
		if me < writers {
			if err := win.Lock(0, true); err != nil {
				return err
			}
			v := make([]int64, 1)
			if err := win.Get(v, 0, 3); err != nil {
				return err
			}
			if err := win.Flush(0); err != nil {
				return err
			}
			a := []int64{v[0] + 1}
			b := []int64{v[0] + 1}
			if err := win.Put(a, 0, 3); err != nil {
				return err
			}
			if err := win.Put(b, 0, 7); err != nil {
				return err
			}
			if err := win.Unlock(0); err != nil {
				return err
			}
		} else {
			if err := win.Lock(0, false); err != nil {
				return err
			}
			a, b := make([]int64, 1), make([]int64, 1)
			if err := win.Get(b, 0, 7); err != nil {
				return err
			}
			if err := win.Get(a, 0, 3); err != nil {
				return err
			}
			if err := win.Unlock(0); err != nil {
				return err
			}
			if a[0] != b[0] {
				return fmt.Errorf("rank %d: read a=%d b=%d under a shared lock", me, a[0], b[0])
			}
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	if me == 0 && (base[3] != int64(writers*iters) || base[7] != base[3]) {
		return fmt.Errorf("final %d %d, want %d", base[3], base[7], writers*iters)
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	return win.Free()
}
