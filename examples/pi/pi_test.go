package main

import (
	"math"
	"testing"

	"github.com/weft-hpc/weft/mpi"
)

func TestPi(t *testing.T) {
	for _, n := range []int{1, 3, 4} {
		err := mpi.Run(n, func(c *mpi.Comm) error {
			pi, err := Pi(c, 100_000)
			if err != nil {
				return err
			}
			if math.Abs(pi-math.Pi) > 1e-9 {
				t.Errorf("%d ranks, rank %d: pi = %.12f", n, c.Rank(), pi)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestPiBadIntervals: gorun -n 2 ./examples/pi -n 0 prints "pi ≈ NaN"
// and exits 0; -n -3 prints "pi ≈ -0.000000000000" and exits 0. Pi must
// refuse n < 1 with an error.
func TestPiBadIntervals(t *testing.T) {
	for _, n := range []int{0, -3} {
		err := mpi.Run(2, func(c *mpi.Comm) error {
			pi, err := Pi(c, n)
			if err == nil {
				t.Errorf("Pi(n=%d) = %v, nil error; want an error for n < 1", n, pi)
				if math.IsNaN(pi) {
					t.Logf("(NaN)")
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
