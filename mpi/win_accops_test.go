package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestWinAccumulateOps: Accumulate takes every predefined op, as in MPI:
// the bitwise and logical ops on integers and MaxLoc and MinLoc on
// (value, index) pairs, each rank into every window (its own too),
// between Fences, on 1-5 ranks, over a reliable device and under faults;
// and refuses an op on a type it is not defined on with ErrArg.
func TestWinAccumulateOps(t *testing.T) {
	runWinCases(t, winAccOpsCase, []int{1, 2, 3, 5})
}

func winAccOpsCase(c *Comm) error {
	const n = 3001 // elements: many packets, an odd count
	p, me := c.Size(), c.Rank()
	base := make([]int32, n)
	win, err := NewWin(c, base)
	if err != nil {
		return err
	}
	contrib := func(r, i int) int32 { return int32((r*5 + i*3) % 7) } // zeros included
	start := func(r, i int) int32 { return int32((i*2 + r) % 4) }
	bitOps := map[Op]func(x, y int32) int32{
		BAnd: func(x, y int32) int32 { return x & y },
		BOr:  func(x, y int32) int32 { return x | y },
		BXor: func(x, y int32) int32 { return x ^ y },
		LAnd: func(x, y int32) int32 { return b2i(x != 0 && y != 0) },
		LOr:  func(x, y int32) int32 { return b2i(x != 0 || y != 0) },
		LXor: func(x, y int32) int32 { return b2i((x != 0) != (y != 0)) },
	}
	for _, op := range []Op{BAnd, BOr, BXor, LAnd, LOr, LXor} {
		for i := range base {
			base[i] = start(me, i)
		}
		if err := win.Fence(); err != nil {
			return err
		}
		src := make([]int32, n)
		for i := range src {
			src[i] = contrib(me, i)
		}
		for k := range p {
			if err := win.Accumulate(src, (me+k)%p, 0, op); err != nil {
				return fmt.Errorf("%v: %w", op, err)
			}
		}
		if err := win.Fence(); err != nil {
			return err
		}
		for i := range base {
			want := start(me, i)
			for r := range p {
				want = bitOps[op](want, contrib(r, i))
			}
			if base[i] != want {
				return fmt.Errorf("%v: window[%d] = %d, want %d", op, i, base[i], want)
			}
		}
	}
	if err := win.Free(); err != nil {
		return err
	}
	// MaxLoc and MinLoc on float64 pairs, at an odd displacement.
	pairs := make([]float64, 2*n+1)
	pw, err := NewWin(c, pairs)
	if err != nil {
		return err
	}
	val := func(r, i int) float64 { return float64((r*7+i*5)%9) - 4 } // ties between ranks
	for _, op := range []Op{MaxLoc, MinLoc} {
		for i := 0; i < n; i++ {
			pairs[1+2*i], pairs[2+2*i] = 0, 1000 // a value no rank beats at MaxLoc ties at 0
		}
		if err := pw.Fence(); err != nil {
			return err
		}
		src := make([]float64, 2*n)
		for i := 0; i < n; i++ {
			src[2*i], src[2*i+1] = val(me, i), float64(me)
		}
		for k := range p {
			if err := pw.Accumulate(src, (me+k)%p, 1, op); err != nil {
				return fmt.Errorf("%v: %w", op, err)
			}
		}
		if err := pw.Fence(); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			wv, wi := 0.0, 1000.0
			for r := range p {
				v := val(r, i)
				better := v > wv
				if op == MinLoc {
					better = v < wv
				}
				if better || v == wv && float64(r) < wi {
					wv, wi = v, float64(r)
				}
			}
			if g, gi := pairs[1+2*i], pairs[2+2*i]; g != wv || gi != wi {
				return fmt.Errorf("%v: pair %d = (%v, %v), want (%v, %v)", op, i, g, gi, wv, wi)
			}
		}
	}
	if err := pw.Free(); err != nil {
		return err
	}
	return winAccOpsRefused(c)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// winAccOpsRefused: ops on types they are not defined on fail with
// ErrArg, in an epoch, and change nothing.
func winAccOpsRefused(c *Comm) error {
	fw, err := NewWin(c, make([]float32, 4))
	if err != nil {
		return err
	}
	cw, err := NewWin(c, make([]complex64, 4))
	if err != nil {
		return err
	}
	if err := fw.Fence(); err != nil {
		return err
	}
	if err := cw.Fence(); err != nil {
		return err
	}
	peer := (c.Rank() + 1) % c.Size()
	for what, err := range map[string]error{
		"BAnd on float32":        fw.Accumulate([]float32{1}, peer, 0, BAnd),
		"LOr on complex64":       cw.Accumulate([]complex64{1}, peer, 0, LOr),
		"MinLoc on complex64":    cw.Accumulate([]complex64{1, 2}, peer, 0, MinLoc),
		"MaxLoc of three floats": fw.Accumulate([]float32{1, 2, 3}, peer, 0, MaxLoc),
	} {
		if !errors.Is(err, ErrArg) {
			return fmt.Errorf("Accumulate of %s: %v, want ErrArg", what, err)
		}
	}
	for _, w := range []interface{ Fence() error }{fw, cw} {
		if err := w.Fence(); err != nil {
			return err
		}
	}
	if err := fw.Free(); err != nil {
		return err
	}
	return cw.Free()
}
