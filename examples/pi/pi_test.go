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
