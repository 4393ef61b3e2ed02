// Command winprocs checks one-sided windows across processes: started by
// gorun (TestWinProcesses), it runs Fence epochs of Put, Get and
// Accumulate with large and small transfers, an exclusive-lock counter,
// and passive-target epochs toward a rank that spins on its own window's
// memory without calling mpi, and exits non-zero, saying what was wrong,
// on any difference.
package main

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	w, err := mpi.Init()
	if err == nil {
		err = run(w.Comm())
		if ferr := w.Finalize(); err == nil {
			err = ferr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "winprocs:", err)
		os.Exit(1)
	}
}

func run(c *mpi.Comm) error {
	for _, n := range []int{37, 100_003} { // 100,003 float64: chunks above the single-copy threshold
		if err := fence(c, n); err != nil {
			return fmt.Errorf("fence, %d elements: %w", n, err)
		}
	}
	if err := counter(c, 30); err != nil {
		return fmt.Errorf("exclusive-lock counter: %w", err)
	}
	if err := idleTarget(c); err != nil {
		return fmt.Errorf("idle target: %w", err)
	}
	return nil
}

// fence: every rank puts a chunk into every window, gets them back, and
// accumulates into them, a Fence between each.
func fence(c *mpi.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	base := make([]float64, n+me)
	win, err := mpi.NewWin(c, base)
	if err != nil {
		return err
	}
	chunk := func(t int) int { return (n + t - 1) / p }
	val := func(r, t, i int) float64 { return float64(r*1_000_000 + t*1000 + i%997) }
	if err := win.Fence(); err != nil {
		return err
	}
	for t := range p {
		src := make([]float64, chunk(t))
		for i := range src {
			src[i] = val(me, t, i)
		}
		if err := win.Put(src, t, me*chunk(t)+1); err != nil {
			return err
		}
	}
	if err := win.Fence(); err != nil {
		return err
	}
	// Checked before the next Fence: once a rank is past it, it may
	// accumulate into this window.
	for r := range p {
		for i := range chunk(me) {
			if v, want := base[r*chunk(me)+1+i], val(r, me, i); v != want {
				return fmt.Errorf("rank %d: window[%d] = %v after Put, want %v", me, r*chunk(me)+1+i, v, want)
			}
		}
	}
	saved := append([]float64(nil), base...)
	got := make([]float64, p*chunk((me+1)%p))
	if err := win.Get(got, (me+1)%p, 1); err != nil {
		return err
	}
	if err := win.Fence(); err != nil {
		return err
	}
	t := (me + 1) % p
	for r := range p {
		for i := range chunk(t) {
			if v, want := got[r*chunk(t)+i], val(r, t, i); v != want {
				return fmt.Errorf("rank %d: Get from rank %d: element %d = %v, want %v", me, t, r*chunk(t)+i, v, want)
			}
		}
	}
	// Rank r adds r+1 to elements [r, r+m) of every window.
	m := n - p + 1
	ones := make([]float64, m)
	for i := range ones {
		ones[i] = float64(me + 1)
	}
	for t := range p {
		if err := win.Accumulate(ones, t, me, mpi.Sum); err != nil {
			return err
		}
	}
	if err := win.Fence(); err != nil {
		return err
	}
	for i, v := range base {
		want := saved[i]
		for r := range p {
			if i >= r && i < r+m {
				want += float64(r + 1)
			}
		}
		if v != want {
			return fmt.Errorf("rank %d: window[%d] = %v after Accumulate, want %v", me, i, v, want)
		}
	}
	return win.Free()
}

// counter: every rank increments rank p-1's window[0] by Get and Put under
// an exclusive lock.
func counter(c *mpi.Comm, iters int) error {
	base := make([]int64, 1)
	win, err := mpi.NewWin(c, base)
	if err != nil {
		return err
	}
	t := c.Size() - 1
	v := make([]int64, 1)
	for range iters {
		if err := win.Lock(t, true); err != nil {
			return err
		}
		if err := win.Get(v, t, 0); err != nil {
			return err
		}
		if err := win.Flush(t); err != nil {
			return err
		}
		v[0]++
		if err := win.Put(v, t, 0); err != nil {
			return err
		}
		if err := win.Unlock(t); err != nil {
			return err
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	if c.Rank() == t && base[0] != int64(c.Size()*iters) {
		return fmt.Errorf("count %d, want %d", base[0], c.Size()*iters)
	}
	return win.Free()
}

// idleTarget: rank 0 spins on its window's last element, calling no mpi,
// until every other rank has locked it, accumulated its share, put a
// large block and added itself to that element.
func idleTarget(c *mpi.Comm) error {
	p, me := c.Size(), c.Rank()
	const block = 20_000 // 160 KB of int64: single copy on shm
	base := make([]int64, p*block+1)
	win, err := mpi.NewWin(c, base)
	if err != nil {
		return err
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	last := len(base) - 1
	if me == 0 {
		for atomic.LoadInt64(&base[last]) != int64(p-1) {
		}
		for r := 1; r < p; r++ {
			for i := range block {
				if want := int64(r*block + i + 1); base[r*block+i] != want {
					return fmt.Errorf("window[%d] = %d, want %d", r*block+i, base[r*block+i], want)
				}
			}
		}
		return win.Free()
	}
	src := make([]int64, block)
	for i := range src {
		src[i] = int64(me*block + i)
	}
	one := []int64{1}
	if err := win.Lock(0, true); err != nil {
		return err
	}
	if err := win.Put(src, 0, me*block); err != nil {
		return err
	}
	if err := win.Unlock(0); err != nil {
		return err
	}
	for i := 0; i < block; i += 100 { // 100 elements per epoch, shared and exclusive in turn
		if err := win.Lock(0, i%200 == 0); err != nil {
			return err
		}
		for j := i; j < i+100; j++ {
			if err := win.Accumulate(one, 0, me*block+j, mpi.Sum); err != nil {
				return err
			}
		}
		if err := win.Unlock(0); err != nil {
			return err
		}
	}
	if err := win.Lock(0, false); err != nil {
		return err
	}
	if err := win.Accumulate(one, 0, last, mpi.Sum); err != nil {
		return err
	}
	if err := win.Unlock(0); err != nil {
		return err
	}
	return win.Free()
}
