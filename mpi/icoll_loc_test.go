package mpi

import (
	"fmt"
	"testing"
)

// TestIcollLoc: Iallreduce MaxLoc and Ireduce MinLoc of float64 and
// int32 pairs with ties, small and large, on 1-6 ranks, under faults.
func TestIcollLoc(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,seed=2"} {
		t.Setenv("WEFT_FAULTS", faults)
		for n := 1; n <= 6; n++ {
			for _, m := range []int{0, 3, 20000} {
				if err := Run(n, func(c *Comm) error { return icollLocCase(c, m) }); err != nil {
					t.Fatalf("%q %d ranks %d pairs: %v", faults, n, m, err)
				}
			}
		}
	}
}

func icollLocCase(c *Comm, m int) error {
	p, me := c.Size(), c.Rank()
	val := func(r, i int) float64 { return float64((r*5 + i*3) % 4) }
	s := make([]float64, 2*m)
	for i := 0; i < m; i++ {
		s[2*i], s[2*i+1] = val(me, i), float64(me)
	}
	r1 := make([]float64, 2*m)
	q1, err := Iallreduce(c, s, r1, MaxLoc)
	if err != nil {
		return err
	}
	r2 := make([]float64, 2*m)
	root := p / 2
	q2, err := Ireduce(c, s, r2, MinLoc, root)
	if err != nil {
		return err
	}
	if _, err := q2.Wait(); err != nil {
		return err
	}
	if _, err := q1.Wait(); err != nil {
		return err
	}
	for i := 0; i < m; i++ {
		mx, mxi, mn, mni := val(0, i), 0.0, val(0, i), 0.0
		for r := 1; r < p; r++ {
			v := val(r, i)
			if v > mx {
				mx, mxi = v, float64(r)
			}
			if v < mn {
				mn, mni = v, float64(r)
			}
		}
		if r1[2*i] != mx || r1[2*i+1] != mxi {
			return fmt.Errorf("rank %d: maxloc %d = (%v,%v), want (%v,%v)", me, i, r1[2*i], r1[2*i+1], mx, mxi)
		}
		if me == root && (r2[2*i] != mn || r2[2*i+1] != mni) {
			return fmt.Errorf("root: minloc %d = (%v,%v), want (%v,%v)", i, r2[2*i], r2[2*i+1], mn, mni)
		}
	}
	return nil
}
