package main

import (
	"strings"
	"testing"

	"github.com/weft-hpc/weft/mpi"
)

func TestRing(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		err := mpi.Run(n, func(c *mpi.Comm) error {
			tok, err := Ring(c, 7)
			if err == nil && c.Rank() == 0 && tok != int64(7*n*(n-1)/2) {
				t.Errorf("n=%d: token %d", n, tok)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRingNegativeLaps: gorun -n 2 ./examples/ring -laps -2 fails with
// "ring: token 0, want -2", as if the ring had lost the token. A negative
// lap count must be refused naming it.
func TestRingNegativeLaps(t *testing.T) {
	err := mpi.Run(2, func(c *mpi.Comm) error {
		_, err := Ring(c, -2)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "laps") {
		t.Fatalf("Ring(laps=-2): want an error naming laps, got %v", err)
	}
}
