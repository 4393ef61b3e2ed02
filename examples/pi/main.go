// Command pi estimates π by integrating 4/(1+x²) over [0,1] with the
// midpoint rule, each rank taking every size-th interval, and combining the
// partial sums with Allreduce. Run it with gorun:
//
//	go run ./cmd/gorun -n 4 ./examples/pi
package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	n := flag.Int("n", 10_000_000, "intervals")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pi:", err)
		os.Exit(1)
	}
	pi, err := Pi(w.Comm(), *n)
	if err == nil && w.Comm().Rank() == 0 {
		fmt.Printf("pi ≈ %.12f, error %.3g, %d intervals on %d ranks\n", pi, math.Abs(pi-math.Pi), *n, w.Comm().Size())
	}
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pi:", err)
		os.Exit(1)
	}
}

// Pi integrates with n intervals across the communicator; every rank gets
// the result. n must be at least 1.
func Pi(c *mpi.Comm, n int) (float64, error) {
	if n < 1 {
		return 0, fmt.Errorf("pi: %d intervals: want at least 1: %w", n, mpi.ErrArg)
	}
	h := 1 / float64(n)
	sum := 0.0
	for i := c.Rank(); i < n; i += c.Size() {
		x := h * (float64(i) + 0.5)
		sum += 4 / (1 + x*x)
	}
	part := []float64{sum * h}
	if err := mpi.Allreduce(c, part, part, mpi.Sum); err != nil {
		return 0, err
	}
	return part[0], nil
}
