package mpi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// affine is an associative, non-commutative op on uint64s that hold an
// affine map x -> a*x + b (mod 2^32) as a<<32 | b: x ∘ y is x then y.
// Any reduction that combines two ranks' parts out of rank order gets a
// different result, and every result is exact.
func affine(x, y uint64) uint64 {
	ax, bx, ay, by := uint32(x>>32), uint32(x), uint32(y>>32), uint32(y)
	return uint64(ax*ay)<<32 | uint64(ay*bx+by)
}

// affineOp is affine as NewOp takes it: inout = in ∘ inout.
var affineOp = NewOp(func(inout, in []uint64) {
	for i := range inout {
		inout[i] = affine(in[i], inout[i])
	}
}, false)

// affineVal is rank r's element i: an odd multiplier and an offset.
func affineVal(r, i int) uint64 {
	return uint64(2*(r*7+i%97)+1)<<32 | uint64(r*131+i*17+3)
}

// xorOp is a commutative user op, which the node-aware, ring, direct and
// large-message algorithms may run.
var xorOp = NewOp(func(inout, in []int32) {
	for i := range inout {
		inout[i] ^= in[i]
	}
}, true)

func xorVal(r, i int) int32 { return int32(r*0x9e3779b1 ^ i*0x7f4a7c15 ^ (r+i)<<7) }

// userOpCase checks Reduce at every root and Allreduce of count elements
// with affineOp (in rank order) and xorOp on c.
func userOpCase(c *Comm, count int) error {
	p, me := c.Size(), c.Rank()
	send := make([]uint64, count)
	want := make([]uint64, count)
	for i := range send {
		send[i] = affineVal(me, i)
		want[i] = affineVal(0, i)
		for r := 1; r < p; r++ {
			want[i] = affine(want[i], affineVal(r, i))
		}
	}
	xsend := make([]int32, count)
	xwant := make([]int32, count)
	for i := range xsend {
		xsend[i] = xorVal(me, i)
		for r := range p {
			xwant[i] ^= xorVal(r, i)
		}
	}
	check := func(what string, got, want []uint64) error {
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("%s of %d on %d ranks, rank %d: [%d] = %#x, want %#x", what, count, p, me, i, got[i], want[i])
			}
		}
		return nil
	}
	for root := range p {
		recv := make([]uint64, count)
		if err := Reduce(c, send, recv, affineOp, root); err != nil {
			return err
		}
		if me == root {
			if err := check(fmt.Sprintf("Reduce to %d", root), recv, want); err != nil {
				return err
			}
		}
		xrecv := make([]int32, count)
		if err := Reduce(c, xsend, xrecv, xorOp, root); err != nil {
			return err
		}
		if me == root && !equal(xrecv, xwant) {
			return fmt.Errorf("xor Reduce to %d of %d on %d ranks: wrong", root, count, p)
		}
	}
	recv := make([]uint64, count)
	if err := Allreduce(c, send, recv, affineOp); err != nil {
		return err
	}
	if err := check("Allreduce", recv, want); err != nil {
		return err
	}
	// In place.
	copy(recv, send)
	if err := Allreduce(c, recv, recv, affineOp); err != nil {
		return err
	}
	if err := check("Allreduce in place", recv, want); err != nil {
		return err
	}
	xrecv := make([]int32, count)
	if err := Allreduce(c, xsend, xrecv, xorOp); err != nil {
		return err
	}
	if !equal(xrecv, xwant) {
		return fmt.Errorf("xor Allreduce of %d on %d ranks: wrong", count, p)
	}
	return nil
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestNewOp: a non-commutative user op reduces in rank order, and a
// commutative one exactly, for 1-9 ranks, every root, counts from one
// element to past the large-message thresholds (ring, direct reads,
// half-RDMA accumulate, which a user op must not take), with the shared
// block on and off, and under injected faults.
func TestNewOp(t *testing.T) {
	counts := []int{1, 7, 301, 20_001, 150_001}
	if testing.Short() || raceEnabled {
		counts = []int{1, 7, 301, 20_001}
	}
	for _, faults := range faultCases {
		for _, shm := range []string{"on", "off"} {
			t.Run(fmt.Sprintf("faults=%q/shm=%s", faults, shm), func(t *testing.T) {
				t.Setenv("WEFT_FAULTS", faults)
				t.Setenv("WEFT_SHMCOLL", shm)
				t.Setenv("WEFT_TIMEOUT", "60s")
				t.Setenv("WEFT_DIRECT", "4096")
				t.Setenv("WEFT_ACCUMULATE", "65536")
				for n := 1; n <= 9; n++ {
					if faults != "" && n != 3 && n != 8 {
						continue
					}
					for _, count := range counts {
						if faults != "" && count > 301 {
							continue
						}
						if err := Run(n, func(c *Comm) error { return userOpCase(c, count) }); err != nil {
							t.Fatalf("%d ranks, %d elements: %v", n, count, err)
						}
					}
				}
			})
		}
	}
}

// TestNewOpHier: on communicators spanning pretend nodes the
// non-commutative op falls back to a flat algorithm that keeps rank
// order; the commutative one goes node by node.
func TestNewOpHier(t *testing.T) {
	for _, nodes := range hierLayouts {
		for _, shm := range []bool{true, false} {
			for _, count := range []int{3, 301, 20_001} {
				if err := runLayout(t, nodes, shm, func(c *Comm) error { return userOpCase(c, count) }); err != nil {
					t.Fatalf("nodes %v, shm %v, %d elements: %v", nodes, shm, count, err)
				}
			}
		}
	}
}

// TestNewOpWrongType: an op used on a slice of another element type,
// even one with the same underlying type, fails with ErrArg naming the
// op and both types, on every rank; so does an op with a nil function.
// The communicator stays usable.
func TestNewOpWrongType(t *testing.T) {
	type celsius uint64
	nilOp := NewOp[float64](nil, true)
	err := Run(3, func(c *Comm) error {
		if err := Allreduce(c, []int32{1}, make([]int32, 1), affineOp); !errors.Is(err, ErrArg) ||
			!strings.Contains(err.Error(), affineOp.String()) || !strings.Contains(err.Error(), "[]int32") {
			return fmt.Errorf("affine op on []int32: %v", err)
		}
		if err := Reduce(c, []celsius{1}, make([]celsius, 1), affineOp, 1); !errors.Is(err, ErrArg) ||
			!strings.Contains(err.Error(), "celsius") {
			return fmt.Errorf("affine op on []celsius: %v", err)
		}
		if err := Allreduce(c, []float64{1}, make([]float64, 1), nilOp); !errors.Is(err, ErrArg) ||
			!strings.Contains(err.Error(), "nil function") {
			return fmt.Errorf("nil op: %v", err)
		}
		if err := Allreduce(c, []float64{1}, make([]float64, 1), Op(1<<20)); !errors.Is(err, ErrArg) {
			return fmt.Errorf("an op never made: %v", err)
		}
		return userOpCase(c, 5)
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := affineOp.String(); !strings.HasPrefix(s, "NewOp#") || !strings.HasSuffix(s, "[uint64]") {
		t.Errorf("affineOp.String() = %q", s)
	}
}
