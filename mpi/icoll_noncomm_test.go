package mpi

import (
	"fmt"
	"testing"
)

// TestIcollNonCommRoots: Ireduce with a non-commutative op at every
// root, and Iallreduce, on 1-7 ranks, several in flight at once, waited
// in reverse order, against a rank-order fold.
func TestIcollNonCommRoots(t *testing.T) {
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,seed=5"} {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for n := 1; n <= 7; n++ {
				for _, count := range []int{0, 1, 5, 3000} {
					if err := Run(n, func(c *Comm) error { return icollNonCommCase(c, count) }); err != nil {
						t.Fatalf("%d ranks, %d elements: %v", n, count, err)
					}
				}
			}
		})
	}
}

func icollNonCommCase(c *Comm, count int) error {
	p, me := c.Size(), c.Rank()
	send := make([]uint64, count)
	for i := range send {
		send[i] = affineVal(me, i)
	}
	want := make([]uint64, count)
	for i := range want {
		acc := affineVal(0, i)
		for r := 1; r < p; r++ {
			acc = affine(acc, affineVal(r, i))
		}
		want[i] = acc
	}
	var reqs []*Request
	recvs := make([][]uint64, p+1)
	for root := 0; root < p; root++ {
		recvs[root] = make([]uint64, count)
		q, err := Ireduce(c, send, recvs[root], affineOp, root)
		if err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	recvs[p] = make([]uint64, count)
	q, err := Iallreduce(c, send, recvs[p], affineOp)
	if err != nil {
		return err
	}
	reqs = append(reqs, q)
	// a blocking one between
	x := []int64{int64(me)}
	if err := Allreduce(c, x, x, Sum); err != nil {
		return err
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		if _, err := reqs[i].Wait(); err != nil {
			return fmt.Errorf("req %d: %w", i, err)
		}
	}
	for k, r := range recvs {
		if k < p && k != me {
			continue
		}
		for i := range r {
			if r[i] != want[i] {
				return fmt.Errorf("rank %d: result %d (root %d of %d) [%d] = %x, want %x", me, k, k, p, i, r[i], want[i])
			}
		}
	}
	return nil
}

// TestIcollSplit: the same on communicators split from the world in
// reverse rank order (ranks of the new communicator are not the world's).
func TestIcollSplit(t *testing.T) {
	for n := 2; n <= 7; n++ {
		for _, count := range []int{0, 5, 3000} {
			err := Run(n, func(c *Comm) error {
				d, err := c.Split(c.Rank()%2, -c.Rank())
				if err != nil {
					return err
				}
				if err := icollNonCommCase(d, count); err != nil {
					return err
				}
				return d.Free()
			})
			if err != nil {
				t.Fatalf("%d ranks, %d elements: %v", n, count, err)
			}
		}
	}
}
