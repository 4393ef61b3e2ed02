package mpi

import (
	"fmt"
	"testing"
)

// TestWinWithIcoll: passive-target epochs on two windows while
// nonblocking collectives are in flight on the same communicator, under
// faults; then Fence epochs with Gets of what the Puts wrote.
func TestWinWithIcoll(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	runWinCases(t, winIcollCase, []int{1, 2, 3, 5})
}

func winIcollCase(c *Comm) error {
	p, me := c.Size(), c.Rank()
	const m = 5001
	a := make([]float64, m*p)
	b := make([]int32, 2*m*p+1)
	for i := 1; i < len(b); i += 2 {
		b[i] = -1 // below every value put
	}
	wa, err := NewWin(c, a)
	if err != nil {
		return err
	}
	wb, err := NewWin(c, b)
	if err != nil {
		return err
	}
	s := make([]float64, 3000)
	for i := range s {
		s[i] = float64(me + i)
	}
	q, err := Iallreduce(c, s, s, Sum)
	if err != nil {
		return err
	}
	qb, err := c.Ibarrier()
	if err != nil {
		return err
	}
	src := make([]float64, m)
	for i := range src {
		src[i] = float64(me*100000 + i)
	}
	pairs := make([]int32, 2*m)
	for i := 0; i < m; i++ {
		pairs[2*i], pairs[2*i+1] = int32((i*3+me)%5), int32(me)
	}
	for k := range p {
		t := (me + k) % p
		if err := wa.Lock(t, false); err != nil {
			return err
		}
		if err := wb.Lock(t, false); err != nil {
			return err
		}
		if err := wa.Put(src, t, me*m); err != nil {
			return err
		}
		if err := wb.Accumulate(pairs, t, 1+2*m*me, MaxLoc); err != nil {
			return err
		}
		if err := wa.Unlock(t); err != nil {
			return err
		}
		if err := wb.Unlock(t); err != nil {
			return err
		}
	}
	if _, _, err := WaitAny(q, qb); err != nil {
		return err
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	for r := range p {
		for i := 0; i < m; i++ {
			if a[r*m+i] != float64(r*100000+i) {
				return fmt.Errorf("rank %d: a[%d] = %v", me, r*m+i, a[r*m+i])
			}
			if v, ix := b[1+2*m*r+2*i], b[2+2*m*r+2*i]; v != int32((i*3+r)%5) || ix != int32(r) {
				return fmt.Errorf("rank %d: pair from %d [%d] = (%d,%d)", me, r, i, v, ix)
			}
		}
	}
	// Fence epochs: each rank reads its left neighbour's block of a.
	if err := wa.Fence(); err != nil {
		return err
	}
	got := make([]float64, m)
	l := (me - 1 + p) % p
	if err := wa.Get(got, l, l*m); err != nil {
		return err
	}
	if err := wa.Fence(); err != nil {
		return err
	}
	for i := range got {
		if got[i] != float64(l*100000+i) {
			return fmt.Errorf("rank %d: got[%d] = %v", me, i, got[i])
		}
	}
	if _, err := q.Wait(); err != nil {
		return err
	}
	if _, err := qb.Wait(); err != nil {
		return err
	}
	for i := range s {
		if w := float64(p*(p-1)/2 + p*i); s[i] != w {
			return fmt.Errorf("rank %d: s[%d] = %v, want %v", me, i, s[i], w)
		}
	}
	if err := wa.Free(); err != nil {
		return err
	}
	return wb.Free()
}
