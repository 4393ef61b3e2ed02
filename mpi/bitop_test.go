package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestBitwiseLogicalOps: BAnd, BOr, BXor, LAnd, LOr and LXor give the
// exact result by Allreduce, Reduce, Scan and Iallreduce on 1-6 ranks, for
// lengths on both sides of the algorithms' switches (a few elements, a
// block per rank that is not a multiple of 8 bytes, 1 MiB), on 1-, 2-, 4-
// and 8-byte integers; a float type fails with ErrArg.
func TestBitwiseLogicalOps(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	for _, n := range []int{1, 2, 3, 4, 6} {
		err := Run(n, func(c *Comm) error {
			for _, elems := range []int{3, 1001, 1 << 17} {
				if err := bitCase[int8](c, elems); err != nil {
					return err
				}
				if err := bitCase[uint16](c, elems); err != nil {
					return err
				}
				if err := bitCase[int32](c, elems); err != nil {
					return err
				}
				if err := bitCase[uint64](c, elems); err != nil {
					return err
				}
			}
			err := Allreduce(c, []float64{1}, make([]float64, 1), BAnd)
			if !errors.Is(err, ErrArg) {
				return fmt.Errorf("BAnd of float64: %v, want ErrArg", err)
			}
			return nil // windows: TestWinAccumulateOps
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}

// bitCase checks the six ops on elems elements of T: rank r's element i
// is (r*37+i*11)%251 with every third rank's zeroed at i%3 == 0, so some
// elements are false on some ranks and true on others.
func bitCase[T int8 | uint16 | int32 | uint64](c *Comm, elems int) error {
	me, p := c.Rank(), c.Size()
	val := func(r, i int) T {
		if r%3 == 2 && i%3 == 0 {
			return 0
		}
		return T((r*37 + i*11) % 251)
	}
	send := make([]T, elems)
	for i := range send {
		send[i] = val(me, i)
	}
	ops := []Op{BAnd, BOr, BXor, LAnd, LOr, LXor}
	apply := func(op Op, x, y T) T {
		b := func(v bool) T {
			if v {
				return 1
			}
			return 0
		}
		switch op {
		case BAnd:
			return x & y
		case BOr:
			return x | y
		case BXor:
			return x ^ y
		case LAnd:
			return b(x != 0 && y != 0)
		case LOr:
			return b(x != 0 || y != 0)
		}
		return b((x != 0) != (y != 0))
	}
	// want is op over ranks 0..hi-1 of element i (one rank's is its own
	// element, as MPI has it, not 1 or 0).
	want := func(op Op, hi, i int) T {
		v := val(0, i)
		for r := 1; r < hi; r++ {
			v = apply(op, v, val(r, i))
		}
		return v
	}
	for _, op := range ops {
		got := make([]T, elems)
		if err := Allreduce(c, send, got, op); err != nil {
			return err
		}
		red := make([]T, elems)
		if err := Reduce(c, send, red, op, p-1); err != nil {
			return err
		}
		scan := make([]T, elems)
		if err := Scan(c, send, scan, op); err != nil {
			return err
		}
		igot := make([]T, elems)
		q, err := Iallreduce(c, send, igot, op)
		if err != nil {
			return err
		}
		if _, err := q.Wait(); err != nil {
			return err
		}
		for i := range elems {
			w := want(op, p, i)
			if got[i] != w || igot[i] != w || me == p-1 && red[i] != w {
				return fmt.Errorf("%v of %d %T on %d ranks, element %d: Allreduce %v, Iallreduce %v, Reduce %v, want %v",
					op, elems, got[0], p, i, got[i], igot[i], red[i], w)
			}
			if ws := want(op, me+1, i); scan[i] != ws {
				return fmt.Errorf("%v of %d %T on %d ranks, element %d: Scan at rank %d %v, want %v", op, elems, got[0], p, i, me, scan[i], ws)
			}
		}
	}
	return nil
}
