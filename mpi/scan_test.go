package mpi

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// scanCase checks Scan, Exscan and ReduceScatterBlock of count elements
// per block on c, with the non-commutative affineOp and with Sum, against
// sequential folds in rank order.
func scanCase(c *Comm, count int) error {
	p, me := c.Size(), c.Rank()
	fold := func(lo, hi, i int) uint64 { // affine over ranks lo..hi-1 of element i
		v := affineVal(lo, i)
		for r := lo + 1; r < hi; r++ {
			v = affine(v, affineVal(r, i))
		}
		return v
	}
	send := make([]uint64, count)
	for i := range send {
		send[i] = affineVal(me, i)
	}
	recv := make([]uint64, count)
	if err := Scan(c, send, recv, affineOp); err != nil {
		return err
	}
	for i := range recv {
		if want := fold(0, me+1, i); recv[i] != want {
			return fmt.Errorf("Scan of %d on %d ranks, rank %d: [%d] = %#x, want %#x", count, p, me, i, recv[i], want)
		}
	}
	// In place, and Exscan, whose rank 0 keeps what its recv held.
	copy(recv, send)
	if err := Scan(c, recv, recv, affineOp); err != nil {
		return err
	}
	for i := range recv {
		if want := fold(0, me+1, i); recv[i] != want {
			return fmt.Errorf("Scan in place of %d on %d ranks, rank %d: [%d] = %#x", count, p, me, i, recv[i])
		}
	}
	for i := range recv {
		recv[i] = 0xdead
	}
	if err := Exscan(c, send, recv, affineOp); err != nil {
		return err
	}
	for i := range recv {
		want := uint64(0xdead)
		if me > 0 {
			want = fold(0, me, i)
		}
		if recv[i] != want {
			return fmt.Errorf("Exscan of %d on %d ranks, rank %d: [%d] = %#x, want %#x", count, p, me, i, recv[i], want)
		}
	}
	isend := make([]int64, count)
	for i := range isend {
		isend[i] = int64(me*1000 - i)
	}
	irecv := make([]int64, count)
	if err := Exscan(c, isend, irecv, Sum); err != nil {
		return err
	}
	if err := Scan(c, isend, isend, Max); err != nil {
		return err
	}
	for i := range irecv {
		if want := int64(me*(me-1)/2*1000 - me*i); me > 0 && irecv[i] != want {
			return fmt.Errorf("Exscan Sum, rank %d: [%d] = %d, want %d", me, i, irecv[i], want)
		}
		if want := int64(me*1000 - i); isend[i] != want {
			return fmt.Errorf("Scan Max, rank %d: [%d] = %d, want %d", me, i, isend[i], want)
		}
	}
	// ReduceScatterBlock: block b of rank r's send is affineVal(r, b*count+i).
	rsend := make([]uint64, p*count)
	for i := range rsend {
		rsend[i] = affineVal(me, i)
	}
	if err := ReduceScatterBlock(c, rsend, recv, affineOp); err != nil {
		return err
	}
	for i := range recv {
		if want := fold(0, p, me*count+i); recv[i] != want {
			return fmt.Errorf("ReduceScatterBlock of %d on %d ranks, rank %d: [%d] = %#x, want %#x", count, p, me, i, recv[i], want)
		}
	}
	fsend := make([]float64, p*count)
	for i := range fsend {
		fsend[i] = float64(me + i)
	}
	frecv := make([]float64, count)
	if err := ReduceScatterBlock(c, fsend, frecv, Sum); err != nil {
		return err
	}
	for i := range frecv {
		if want := float64(p*(p-1)/2 + p*(me*count+i)); frecv[i] != want {
			return fmt.Errorf("ReduceScatterBlock Sum, rank %d: [%d] = %v, want %v", me, i, frecv[i], want)
		}
	}
	return nil
}

// TestScan: Scan, Exscan and ReduceScatterBlock give the sequential
// result in rank order for 1-9 ranks and odd counts, with the shared
// block on and off, and under injected faults.
func TestScan(t *testing.T) {
	for _, faults := range faultCases {
		for _, shm := range []string{"on", "off"} {
			t.Run(fmt.Sprintf("faults=%q/shm=%s", faults, shm), func(t *testing.T) {
				t.Setenv("WEFT_FAULTS", faults)
				t.Setenv("WEFT_SHMCOLL", shm)
				t.Setenv("WEFT_TIMEOUT", "60s")
				for n := 1; n <= 9; n++ {
					for _, count := range []int{1, 3, 77, 5001} {
						if faults != "" && (n%3 != 2 || count > 77) {
							continue
						}
						if err := Run(n, func(c *Comm) error { return scanCase(c, count) }); err != nil {
							t.Fatalf("%d ranks, %d elements: %v", n, count, err)
						}
					}
				}
			})
		}
	}
}

// TestScanHier: on communicators spanning pretend nodes.
func TestScanHier(t *testing.T) {
	for _, nodes := range hierLayouts {
		if err := runLayout(t, nodes, true, func(c *Comm) error { return scanCase(c, 33) }); err != nil {
			t.Fatalf("nodes %v: %v", nodes, err)
		}
	}
}

// TestScanArgs: lengths that do not fit fail with ErrArg naming them, on
// every rank; ranks that disagree on the length get an error, not a hang.
func TestScanArgs(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(3, func(c *Comm) error {
		if err := Scan(c, make([]int32, 3), make([]int32, 2), Sum); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "recv has 2") {
			return fmt.Errorf("Scan with a short recv: %v", err)
		}
		if err := Exscan(c, make([]complex64, 1), make([]complex64, 1), Max); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Exscan Max of complex: %v", err)
		}
		if err := ReduceScatterBlock(c, make([]int32, 7), make([]int32, 2), Sum); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "need 6") {
			return fmt.Errorf("ReduceScatterBlock with 7 of 3x2: %v", err)
		}
		n := 4
		if c.Rank() == 1 {
			n = 5
		}
		if err := Scan(c, make([]int32, n), make([]int32, n), Sum); !errors.Is(err, ErrArg) {
			return fmt.Errorf("rank %d: Scan of different lengths: %v", c.Rank(), err)
		}
		return scanCase(c, 5)
	})
	if err != nil {
		t.Fatal(err)
	}
}
