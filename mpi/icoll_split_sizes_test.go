package mpi

import "testing"

// TestIcollSplitSizes: the non-commutative cases at sizes a split
// rendezvous moves (from WEFT_SPLIT, 256 KiB), with and without faults.
func TestIcollSplitSizes(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,seed=9"} {
		t.Setenv("WEFT_FAULTS", faults)
		for _, n := range []int{2, 3, 5} {
			for _, count := range []int{40000, 100001} {
				if err := Run(n, func(c *Comm) error { return icollNonCommCase(c, count) }); err != nil {
					t.Fatalf("%q %d ranks, %d: %v", faults, n, count, err)
				}
			}
		}
	}
}
