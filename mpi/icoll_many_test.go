package mpi

import (
	"fmt"
	"testing"
)

// TestIcollMany: more nonblocking collectives in flight on one
// communicator than the ring of signatures holds, of every kind, zero
// lengths among them, completed by TestAll polling at odd ranks and
// Waits in reverse at even ones, under faults.
func TestIcollMany(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,seed=3"} {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for _, n := range []int{1, 2, 3, 4} {
				if err := Run(n, icollManyCase); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

func icollManyCase(c *Comm) error {
	p, me := c.Size(), c.Rank()
	type check func() error
	var reqs []*Request
	var checks []check
	for k := 0; k < 40; k++ {
		cnt := (k % 4) * 3 // 0, 3, 6, 9
		switch k % 5 {
		case 0:
			q, err := c.Ibarrier()
			if err != nil {
				return err
			}
			reqs, checks = append(reqs, q), append(checks, func() error { return nil })
		case 1:
			root := k % p
			b := make([]int32, cnt)
			if me == root {
				for i := range b {
					b[i] = int32(k*100 + i)
				}
			}
			q, err := Ibcast(c, b, root)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
			checks = append(checks, func() error {
				for i := range b {
					if b[i] != int32(k*100+i) {
						return fmt.Errorf("Ibcast %d: [%d] = %d", k, i, b[i])
					}
				}
				return nil
			})
		case 2:
			s := make([]int64, cnt)
			for i := range s {
				s[i] = int64(me*k + i)
			}
			r := make([]int64, p*cnt)
			q, err := Iallgather(c, s, r)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
			checks = append(checks, func() error {
				for rr := range p {
					for i := range cnt {
						if r[rr*cnt+i] != int64(rr*k+i) {
							return fmt.Errorf("Iallgather %d: [%d][%d] = %d", k, rr, i, r[rr*cnt+i])
						}
					}
				}
				return nil
			})
		case 3:
			s := make([]uint64, cnt)
			for i := range s {
				s[i] = affineVal(me, i+k)
			}
			r := make([]uint64, cnt)
			q, err := Iallreduce(c, s, r, affineOp)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
			checks = append(checks, func() error {
				for i := range cnt {
					acc := affineVal(0, i+k)
					for rr := 1; rr < p; rr++ {
						acc = affine(acc, affineVal(rr, i+k))
					}
					if r[i] != acc {
						return fmt.Errorf("Iallreduce %d: [%d] wrong", k, i)
					}
				}
				return nil
			})
		case 4:
			s := make([]int32, cnt*p)
			for i := range s {
				s[i] = int32(me*1000 + i + k)
			}
			r := make([]int32, cnt*p)
			q, err := Ialltoall(c, s, r)
			if err != nil {
				return err
			}
			reqs = append(reqs, q)
			checks = append(checks, func() error {
				for rr := range p {
					for i := range cnt {
						if w := int32(rr*1000 + me*cnt + i + k); r[rr*cnt+i] != w {
							return fmt.Errorf("Ialltoall %d: [%d][%d] = %d, want %d", k, rr, i, r[rr*cnt+i], w)
						}
					}
				}
				return nil
			})
		}
		if k%7 == 0 {
			x := []int32{1}
			if err := Allreduce(c, x, x, Sum); err != nil {
				return err
			}
			if x[0] != int32(p) {
				return fmt.Errorf("Allreduce %d", x[0])
			}
		}
	}
	if me%2 == 1 {
		for {
			done, err := TestAll(reqs...)
			if err != nil {
				return err
			}
			if done {
				break
			}
		}
	} else {
		for i := len(reqs) - 1; i >= 0; i-- {
			if _, err := reqs[i].Wait(); err != nil {
				return fmt.Errorf("rank %d req %d: %w", me, i, err)
			}
		}
	}
	for _, ck := range checks {
		if err := ck(); err != nil {
			return fmt.Errorf("rank %d: %w", me, err)
		}
	}
	return nil
}
