package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestRevVectorOneRankWrong: in each vector collective one rank passes
// bad counts or displacements. That rank fails with ErrArg; the others
// must not hang (the call is aborted on all, agree.go), and the
// communicator stays usable: a Barrier and a correct call follow.
func TestRevVectorOneRankWrong(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	const n = 4
	for _, l := range []int{3, 300_000} {
		for _, which := range []string{"gatherv", "scatterv", "allgatherv", "alltoallv"} {
			err := Run(n, func(c *Comm) error {
				me := c.Rank()
				counts := []int{l, l, l, l}
				displs := []int{0, l, 2 * l, 3 * l}
				bad := []int{0, l, 2 * l, 4 * l} // block 3 runs past the buffer
				big := make([]int32, n*l)
				one := make([]int32, l)
				d := displs
				if me == 2 {
					d = bad
				}
				var err error
				switch which {
				case "gatherv":
					err = Gatherv(c, one, big, counts, d, 2)
				case "scatterv":
					err = Scatterv(c, big, counts, d, one, 2)
				case "allgatherv":
					err = Allgatherv(c, one, big, counts, d)
				case "alltoallv":
					err = Alltoallv(c, big, counts, displs, make([]int32, n*l), counts, d)
				}
				if me == 2 && !errors.Is(err, ErrArg) {
					return fmt.Errorf("%s: the rank with bad displs got %v, want ErrArg", which, err)
				}
				if err := c.Barrier(); err != nil {
					return fmt.Errorf("%s: Barrier after: %w", which, err)
				}
				for i := range one {
					one[i] = int32(me)
				}
				if err := Allgatherv(c, one, big, counts, displs); err != nil {
					return fmt.Errorf("%s: Allgatherv after: %w", which, err)
				}
				for i, v := range big {
					if v != int32(i/l) {
						return fmt.Errorf("%s: Allgatherv after: big[%d] = %d", which, i, v)
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("%d elements: %v", l, err)
			}
		}
	}
}
