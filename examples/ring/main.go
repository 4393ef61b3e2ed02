// Command ring passes a token around the ranks: rank 0 starts it, each rank
// adds its rank and forwards it, and rank 0 checks the total after the
// requested number of laps.
//
//	go run ./cmd/gorun -n 4 ./examples/ring -laps 10
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	laps := flag.Int("laps", 10, "times the token goes round")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ring:", err)
		os.Exit(1)
	}
	tok, err := Ring(w.Comm(), *laps)
	if err == nil && w.Comm().Rank() == 0 {
		fmt.Printf("token %d after %d laps of %d ranks\n", tok, *laps, w.Comm().Size())
	}
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ring:", err)
		os.Exit(1)
	}
}

// Ring sends the token round laps times and returns it at rank 0 (other
// ranks return the last value they forwarded). The final value is
// laps * size*(size-1)/2. laps must not be negative.
func Ring(c *mpi.Comm, laps int) (int64, error) {
	if laps < 0 {
		return 0, fmt.Errorf("ring: %d laps: want 0 or more: %w", laps, mpi.ErrArg)
	}
	p, me := c.Size(), c.Rank()
	next, prev := (me+1)%p, (me-1+p)%p
	tok := []int64{0}
	for lap := 0; lap < laps; lap++ {
		if me != 0 {
			if _, err := mpi.Recv(c, tok, prev, lap); err != nil {
				return 0, err
			}
		}
		tok[0] += int64(me)
		if p == 1 {
			continue
		}
		if err := mpi.Send(c, tok, next, lap); err != nil {
			return 0, err
		}
		if me == 0 {
			if _, err := mpi.Recv(c, tok, prev, lap); err != nil {
				return 0, err
			}
		}
	}
	if me == 0 {
		if want := int64(laps * p * (p - 1) / 2); tok[0] != want {
			return tok[0], fmt.Errorf("ring: token %d, want %d", tok[0], want)
		}
	}
	return tok[0], nil
}
