package main

import (
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
