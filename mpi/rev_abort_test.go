package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestRevRootedAbortThenBarrier: the root of a small rooted collective
// finds its own arguments wrong (ErrArg); the other ranks, which only
// send, may return nil (doc.go). "The communicator stays usable": the
// next Barrier must succeed on every rank.
func TestRevRootedAbortThenBarrier(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, which := range []string{"gather", "gatherv", "reduce"} {
		err := Run(4, func(c *Comm) error {
			const root = 2
			one := []int32{int32(c.Rank())}
			var err error
			switch which {
			case "gather":
				err = Gather(c, one, make([]int32, 3), root) // root's recv one short
			case "gatherv":
				err = Gatherv(c, one, make([]int32, 4), []int{1, 1, 1, 1}, []int{0, 1, 2, 4}, root)
			case "reduce":
				err = Reduce(c, one, make([]int32, 2), Sum, root) // root's recv the wrong length
			}
			if c.Rank() == root && !errors.Is(err, ErrArg) {
				return fmt.Errorf("%s: root got %v, want ErrArg", which, err)
			}
			if err := c.Barrier(); err != nil {
				return fmt.Errorf("%s: Barrier after: %w", which, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}
