package mpi

import (
	"fmt"
	"testing"
)

// TestIallgatherLarge: Iallgather and Ialltoall of blocks a split
// rendezvous moves, the same send buffer going to every peer at once,
// two in flight, under faults.
func TestIallgatherLarge(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,seed=4"} {
		t.Setenv("WEFT_FAULTS", faults)
		for _, n := range []int{2, 3, 4} {
			err := Run(n, func(c *Comm) error {
				p, me := c.Size(), c.Rank()
				const m = 40000
				s := make([]int64, m)
				for i := range s {
					s[i] = int64(me*1000003 + i)
				}
				r1, r2 := make([]int64, p*m), make([]int64, p*m)
				q1, err := Iallgather(c, s, r1)
				if err != nil {
					return err
				}
				a := make([]int64, p*m)
				for i := range a {
					a[i] = int64(me*1000003 + i)
				}
				q2, err := Ialltoall(c, a, r2)
				if err != nil {
					return err
				}
				q3, err := Iallgather(c, s, r1[:0:0])
				_ = q3
				if err == nil {
					if _, err = q3.Wait(); err == nil {
						return fmt.Errorf("short recv accepted")
					}
				}
				if _, err := q2.Wait(); err != nil {
					return err
				}
				if _, err := q1.Wait(); err != nil {
					return err
				}
				for r := range p {
					for i := range m {
						if r1[r*m+i] != int64(r*1000003+i) {
							return fmt.Errorf("rank %d: allgather [%d][%d] = %d", me, r, i, r1[r*m+i])
						}
						if w := int64(r*1000003 + me*m + i); r2[r*m+i] != w {
							return fmt.Errorf("rank %d: alltoall [%d][%d] = %d, want %d", me, r, i, r2[r*m+i], w)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%q %d ranks: %v", faults, n, err)
			}
		}
	}
}
