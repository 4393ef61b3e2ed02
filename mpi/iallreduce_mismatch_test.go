package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestIallreduceMismatchDirect: ranks disagree on an Iallreduce's
// length, one above the direct-read threshold, the other below; both
// fail with ErrArg (one waiting by Wait, one polling TestAll), none hangs.
func TestIallreduceMismatchDirect(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, n := range []int{2, 3} {
		directRanks(t, n)
		err := Run(n, func(c *Comm) error {
			cnt := 40000
			if c.Rank() == 1 {
				cnt = 5
			}
			s := make([]float64, cnt)
			q, err := Iallreduce(c, s, s, Sum)
			if err != nil {
				if errors.Is(err, ErrArg) {
					return nil
				}
				return err
			}
			if c.Rank()%2 == 0 {
				_, err = q.Wait()
			} else {
				for {
					done, e := TestAll(q)
					if done {
						err = e
						break
					}
				}
			}
			if !errors.Is(err, ErrArg) {
				return fmt.Errorf("rank %d: %v, want ErrArg", c.Rank(), err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}
