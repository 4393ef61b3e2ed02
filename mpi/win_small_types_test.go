package mpi

import (
	"fmt"
	"testing"
)

// TestWinAccSmallTypes: bitwise Accumulates of uint8 and int16 and
// MinLoc of int32 pairs at odd displacements, several per epoch and
// overlapping, under shared locks from every rank, under faults.
func TestWinAccSmallTypes(t *testing.T) {
	runWinCases(t, accSmallTypesCase, []int{1, 2, 3})
}

func accSmallTypesCase(c *Comm) error {
	const n = 70001
	p, me := c.Size(), c.Rank()
	u8 := make([]uint8, n+3)
	w8, err := NewWin(c, u8)
	if err != nil {
		return err
	}
	i16 := make([]int16, n+3)
	for i := range i16 {
		i16[i] = -1
	}
	w16, err := NewWin(c, i16)
	if err != nil {
		return err
	}
	pr := make([]int32, 2*n+1)
	for i := 0; i < n; i++ {
		pr[1+2*i], pr[2+2*i] = 1<<30, 1<<30
	}
	wp, err := NewWin(c, pr)
	if err != nil {
		return err
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	x8 := func(r, i int) uint8 { return uint8(r*37 + i*11 + 1) }
	b16 := func(r, i int) int16 { return int16(^(1 << ((r + i) % 16))) }
	v32 := func(r, i int) int32 { return int32((r*13 + i*7) % 11) }
	s8 := make([]uint8, n)
	s16 := make([]int16, n)
	sp := make([]int32, 2*n)
	for i := 0; i < n; i++ {
		s8[i], s16[i] = x8(me, i), b16(me, i)
		sp[2*i], sp[2*i+1] = v32(me, i), int32(me)
	}
	for k := 0; k < p; k++ {
		t := (me + k) % p
		for _, l := range []func() error{
			func() error { return w8.Lock(t, false) },
			func() error { return w16.Lock(t, false) },
			func() error { return wp.Lock(t, false) },
			// two halves, then the whole once more (xor twice = none)
			func() error { return w8.Accumulate(s8[:n/2], t, 3, BXor) },
			func() error { return w8.Accumulate(s8[n/2:], t, 3+n/2, BXor) },
			func() error { return w8.Accumulate(s8, t, 3, BXor) },
			func() error { return w8.Accumulate(s8, t, 3, BXor) },
			func() error { return w16.Accumulate(s16, t, 1, BAnd) },
			func() error { return wp.Accumulate(sp, t, 1, MinLoc) },
			func() error { return wp.Accumulate(sp[:2*(n/3)], t, 1, MinLoc) },
			func() error { return w8.Unlock(t) },
			func() error { return w16.Unlock(t) },
			func() error { return wp.Unlock(t) },
		} {
			if err := l(); err != nil {
				return err
			}
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var w8v uint8
		w16v := int16(-1)
		wv, wi := int32(1<<30), int32(1<<30)
		for r := range p {
			w8v ^= x8(r, i)
			w16v &= b16(r, i)
			if v := v32(r, i); v < wv || v == wv && int32(r) < wi {
				wv, wi = v, int32(r)
			}
		}
		if u8[3+i] != w8v {
			return fmt.Errorf("rank %d: u8[%d] = %d, want %d", me, 3+i, u8[3+i], w8v)
		}
		if i16[1+i] != w16v {
			return fmt.Errorf("rank %d: i16[%d] = %d, want %d", me, 1+i, i16[1+i], w16v)
		}
		if pr[1+2*i] != wv || pr[2+2*i] != wi {
			return fmt.Errorf("rank %d: pair %d = (%d,%d), want (%d,%d)", me, i, pr[1+2*i], pr[2+2*i], wv, wi)
		}
	}
	for _, f := range []func() error{w8.Free, w16.Free, wp.Free} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}
