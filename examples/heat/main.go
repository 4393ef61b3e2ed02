// Command heat solves the 2-D Laplace equation on a square plate with a
// hot top edge by Jacobi iteration. The rows are split among the ranks
// (at least one each); each step exchanges one halo row with each
// neighbour (Sendrecv), and a position-weighted checksum of the result is
// combined with Allreduce and printed: it is the same on any number of
// ranks (heat_test.go checks it against one rank's).
//
//	go run ./cmd/gorun -n 4 ./examples/heat -n 128 -steps 500
package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	n := flag.Int("n", 128, "grid points per side (interior)")
	steps := flag.Int("steps", 500, "Jacobi iterations")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
	c := w.Comm()
	res, err := Solve(c, *n, *steps)
	if err == nil {
		var sum float64
		sum, err = Checksum(c, res, *n)
		if err == nil && c.Rank() == 0 {
			fmt.Printf("heat: %dx%d grid, %d steps on %d ranks: checksum %.9f\n", *n, *n, *steps, c.Size(), sum)
		}
	}
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "heat:", err)
		os.Exit(1)
	}
}

// Part is one rank's band of rows: rows [Lo, Hi) of the n×n interior,
// stored with a halo row above and below.
type Part struct {
	Lo, Hi int
	Grid   [][]float64 // (Hi-Lo+2) rows of n+2 columns
}

// rows splits n rows among p ranks as evenly as possible.
func rows(n, p, r int) (lo, hi int) { return r * n / p, (r + 1) * n / p }

// Solve runs steps Jacobi iterations on an n×n interior whose top boundary
// is 1 and other boundaries 0. Every rank needs a row: n below the
// communicator's size fails, as do n < 1 and steps < 0, on every rank alike.
func Solve(c *mpi.Comm, n, steps int) (*Part, error) {
	p, me := c.Size(), c.Rank()
	switch {
	case n < 1 || steps < 0:
		return nil, fmt.Errorf("heat: a %d×%d grid and %d steps: want n ≥ 1 and steps ≥ 0: %w", n, n, steps, mpi.ErrArg)
	case n < p:
		return nil, fmt.Errorf("heat: %d rows among %d ranks: every rank needs one (n ≥ %d): %w", n, p, p, mpi.ErrArg)
	}
	lo, hi := rows(n, p, me)
	h := hi - lo
	cur, nxt := grid(h+2, n+2), grid(h+2, n+2)
	if lo == 0 { // the global top boundary lives in this rank's upper halo
		for j := range cur[0] {
			cur[0][j], nxt[0][j] = 1, 1
		}
	}
	up, down := me-1, me+1
	for s := 0; s < steps; s++ {
		// Halo exchange: send my first row up and last row down.
		if up >= 0 && h > 0 {
			if _, err := mpi.Sendrecv(c, cur[1], up, 0, cur[0], up, 1); err != nil {
				return nil, err
			}
		}
		if down < p && h > 0 {
			if _, err := mpi.Sendrecv(c, cur[h], down, 1, cur[h+1], down, 0); err != nil {
				return nil, err
			}
		}
		for i := 1; i <= h; i++ {
			for j := 1; j <= n; j++ {
				nxt[i][j] = 0.25 * (cur[i-1][j] + cur[i+1][j] + cur[i][j-1] + cur[i][j+1])
			}
		}
		cur, nxt = nxt, cur
	}
	return &Part{Lo: lo, Hi: hi, Grid: cur}, nil
}

// Checksum is the sum of every interior point weighted by its position, so
// that a misplaced row changes it; every rank gets it.
func Checksum(c *mpi.Comm, part *Part, n int) (float64, error) {
	s := 0.0
	for i := 1; i <= part.Hi-part.Lo; i++ {
		for j := 1; j <= n; j++ {
			s += part.Grid[i][j] * float64((part.Lo+i)*(n+2)+j)
		}
	}
	v := []float64{s}
	err := mpi.Allreduce(c, v, v, mpi.Sum)
	return v[0], err
}

func grid(r, c int) [][]float64 {
	g := make([][]float64, r)
	for i := range g {
		g[i] = make([]float64, c)
	}
	return g
}

// relClose reports whether a and b agree to rel relative error.
func relClose(a, b, rel float64) bool { return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b)) }
