package mpi

import (
	"fmt"
	"testing"
)

// TestScanNonComm: Scan and Exscan with a non-commutative op, in
// place and not, zero and odd lengths, with a nonblocking Iallreduce in
// flight across them, on 1-7 ranks.
func TestScanNonComm(t *testing.T) {
	for n := 1; n <= 7; n++ {
		for _, count := range []int{0, 1, 7, 2000} {
			if err := Run(n, func(c *Comm) error { return scanNonCommCase(c, count) }); err != nil {
				t.Fatalf("%d ranks, %d: %v", n, count, err)
			}
		}
	}
}

func scanNonCommCase(c *Comm, count int) error {
	me := c.Rank()
	mk := func() []uint64 {
		s := make([]uint64, count)
		for i := range s {
			s[i] = affineVal(me, i)
		}
		return s
	}
	pref := func(upto, i int) uint64 {
		acc := affineVal(0, i)
		for r := 1; r <= upto; r++ {
			acc = affine(acc, affineVal(r, i))
		}
		return acc
	}
	ia := mk()
	q, err := Iallreduce(c, ia, ia, affineOp)
	if err != nil {
		return err
	}
	s1 := mk()
	r1 := make([]uint64, count)
	if err := Scan(c, s1, r1, affineOp); err != nil {
		return err
	}
	s2 := mk()
	if err := Scan(c, s2, s2, affineOp); err != nil {
		return err
	}
	s3 := mk()
	r3 := make([]uint64, count)
	for i := range r3 {
		r3[i] = 12345
	}
	if err := Exscan(c, s3, r3, affineOp); err != nil {
		return err
	}
	s4 := mk()
	if err := Exscan(c, s4, s4, affineOp); err != nil {
		return err
	}
	if _, err := q.Wait(); err != nil {
		return err
	}
	for i := 0; i < count; i++ {
		if r1[i] != pref(me, i) || s2[i] != pref(me, i) {
			return fmt.Errorf("rank %d: scan [%d] wrong", me, i)
		}
		if ia[i] != pref(c.Size()-1, i) {
			return fmt.Errorf("rank %d: iallreduce [%d] wrong", me, i)
		}
		if me == 0 {
			if r3[i] != 12345 || s4[i] != affineVal(0, i) {
				return fmt.Errorf("rank 0: exscan changed recv [%d]: %x %x", i, r3[i], s4[i])
			}
			continue
		}
		if r3[i] != pref(me-1, i) || s4[i] != pref(me-1, i) {
			return fmt.Errorf("rank %d: exscan [%d] = %x / %x, want %x", me, i, r3[i], s4[i], pref(me-1, i))
		}
	}
	return nil
}
