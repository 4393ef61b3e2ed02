package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestMaxLocMinLoc: (value, index) pairs reduce to the largest (smallest)
// value and the lowest index holding it, by Allreduce, Reduce, Scan and
// Iallreduce, for 1-9 ranks, with ties; an odd length, a complex type and
// a window's Accumulate fail with ErrArg.
func TestMaxLocMinLoc(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for n := 1; n <= 9; n++ {
		err := Run(n, func(c *Comm) error {
			me, p := c.Rank(), c.Size()
			// Pair i: rank r's value is (r*7+i)%5, so several ranks tie.
			val := func(r, i int) float64 { return float64((r*7 + i) % 5) }
			const pairs = 33
			send := make([]float64, 2*pairs)
			for i := range pairs {
				send[2*i], send[2*i+1] = val(me, i), float64(me)
			}
			want := func(hi int, max bool, i int) (float64, float64) {
				bv, bi := val(0, i), 0
				for r := 1; r < hi; r++ {
					if v := val(r, i); max && v > bv || !max && v < bv {
						bv, bi = v, r
					}
				}
				return bv, float64(bi)
			}
			for _, op := range []Op{MaxLoc, MinLoc} {
				got := make([]float64, len(send))
				if err := Allreduce(c, send, got, op); err != nil {
					return err
				}
				red := make([]float64, len(send))
				if err := Reduce(c, send, red, op, p-1); err != nil {
					return err
				}
				scan := make([]float64, len(send))
				if err := Scan(c, send, scan, op); err != nil {
					return err
				}
				igot := make([]float64, len(send))
				q, err := Iallreduce(c, send, igot, op)
				if err != nil {
					return err
				}
				if _, err := q.Wait(); err != nil {
					return err
				}
				for i := range pairs {
					wv, wi := want(p, op == MaxLoc, i)
					if got[2*i] != wv || got[2*i+1] != wi || igot[2*i] != wv || igot[2*i+1] != wi {
						return fmt.Errorf("%v on %d ranks, pair %d: Allreduce (%v, %v), Iallreduce (%v, %v), want (%v, %v)",
							op, p, i, got[2*i], got[2*i+1], igot[2*i], igot[2*i+1], wv, wi)
					}
					if me == p-1 && (red[2*i] != wv || red[2*i+1] != wi) {
						return fmt.Errorf("%v Reduce pair %d: (%v, %v), want (%v, %v)", op, i, red[2*i], red[2*i+1], wv, wi)
					}
					if sv, si := want(me+1, op == MaxLoc, i); scan[2*i] != sv || scan[2*i+1] != si {
						return fmt.Errorf("%v Scan rank %d pair %d: (%v, %v), want (%v, %v)", op, me, i, scan[2*i], scan[2*i+1], sv, si)
					}
				}
			}
			if err := Allreduce(c, make([]int32, 3), make([]int32, 3), MaxLoc); !errors.Is(err, ErrArg) {
				return fmt.Errorf("MaxLoc of 3 elements: %v", err)
			}
			if err := Allreduce(c, make([]complex64, 2), make([]complex64, 2), MinLoc); !errors.Is(err, ErrArg) {
				return fmt.Errorf("MinLoc of complex: %v", err)
			}
			return nil // windows: TestWinAccumulateOps
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}
