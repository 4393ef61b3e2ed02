package main

import (
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

// TestHeat checks the distributed solve against the one-rank solve: the
// Jacobi update reads only the previous step, so the grids must agree
// exactly, point by point; only the checksum's summation order differs.
func TestHeat(t *testing.T) {
	const n, steps = 40, 200
	var ref *Part
	if err := mpi.Run(1, func(c *mpi.Comm) error {
		var err error
		ref, err = Solve(c, n, steps)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ref.Grid[1][n/2] <= 0.1 || ref.Grid[n][n/2] <= 0 {
		t.Fatalf("reference did not conduct heat: top %v bottom %v", ref.Grid[1][n/2], ref.Grid[n][n/2])
	}
	for _, p := range []int{2, 3, 4, 7} {
		err := mpi.Run(p, func(c *mpi.Comm) error {
			part, err := Solve(c, n, steps)
			if err != nil {
				return err
			}
			for i := 1; i <= part.Hi-part.Lo; i++ {
				for j := 1; j <= n; j++ {
					if got, want := part.Grid[i][j], ref.Grid[part.Lo+i][j]; got != want {
						t.Errorf("p=%d rank %d point (%d,%d): %v, want %v", p, c.Rank(), part.Lo+i, j, got, want)
						return nil
					}
				}
			}
			sum, err := Checksum(c, part, n)
			if err != nil {
				return err
			}
			refSum := 0.0
			for i := 1; i <= n; i++ {
				for j := 1; j <= n; j++ {
					refSum += ref.Grid[i][j] * float64(i*(n+2)+j)
				}
			}
			if !relClose(sum, refSum, 1e-12) {
				t.Errorf("p=%d: checksum %v, want %v", p, sum, refSum)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestHeatFewerRowsThanRanks: with fewer interior rows than ranks
// (gorun -n 3 ./examples/heat -n 2) a rank gets an empty band and skips the
// halo exchange its neighbour waits in, so the job hung. Solve refuses it
// on every rank (ErrArg).
func TestHeatFewerRowsThanRanks(t *testing.T) {
	const n, steps = 2, 3
	err := mpi.RunWith(3, mpi.Options{Timeout: 5 * time.Second}, func(c *mpi.Comm) error {
		_, err := Solve(c, n, steps)
		return err
	})
	if !errors.Is(err, mpi.ErrArg) {
		t.Fatalf("Solve(n=%d) on 3 ranks: %v, want it refused (ErrArg), not a hang", n, err)
	}
}

// TestHeatBadSize: a negative grid size (gorun -n 2 ./examples/heat -n -5)
// panics in makeslice; it must be refused with an error instead.
func TestHeatBadSize(t *testing.T) {
	err := mpi.Run(2, func(c *mpi.Comm) error {
		_, err := Solve(c, -5, 1)
		return err
	})
	if !errors.Is(err, mpi.ErrArg) {
		t.Fatalf("Solve(n=-5): want an error naming the bad size, got %v", err)
	}
}
