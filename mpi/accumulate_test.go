package mpi

import (
	"fmt"
	"strings"
	"testing"
)

// allreduceCase runs Allreduce of count elements of T with op on n ranks,
// rank r contributing gen(r, i), and checks every rank's result against
// the sequential fold of the contributions. Values are small integers, so
// float sums and products are exact in any order.
func allreduceCase[T Elem](t *testing.T, n, count int, op Op, gen func(r, i int) T, fold func(a, b T) T) {
	t.Helper()
	want := make([]T, count)
	for i := range want {
		want[i] = gen(0, i)
		for r := 1; r < n; r++ {
			want[i] = fold(want[i], gen(r, i))
		}
	}
	err := Run(n, func(c *Comm) error {
		buf := make([]T, count)
		for i := range buf {
			buf[i] = gen(c.Rank(), i)
		}
		for range 2 { // twice: the counters must be left at zero
			got := make([]T, count)
			if err := Allreduce(c, buf, got, op); err != nil {
				return err
			}
			for i := range got {
				if got[i] != want[i] {
					return fmt.Errorf("rank %d: element %d = %v, want %v", c.Rank(), i, got[i], want[i])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAllreduceAccumulate: large Allreduces, which reduce by half-RDMA,
// give the sequential result for several types, ops and rank counts, with
// counts that do not divide evenly, over a reliable device and under
// injected faults.
func TestAllreduceAccumulate(t *testing.T) {
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,corrupt=0.01,seed=5"} {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_DIRECT", "0") // else two ranks in one process read directly
			for _, n := range []int{2, 3, 5, 8} {
				const count = 150_001 // 1.2 MB of float64: above accumulateLarge
				allreduceCase(t, n, count, Sum, func(r, i int) float64 { return float64((r+1)*(i%1000) - 7) },
					func(a, b float64) float64 { return a + b })
				allreduceCase(t, n, 3*count, Max, func(r, i int) int32 { return int32((r*7919 + i*31) % 1000) },
					func(a, b int32) int32 { return max(a, b) })
				allreduceCase(t, n, count, Prod, func(r, i int) complex128 { return complex(float64(1+(r+i)%2), float64((r+i)%3-1)) },
					func(a, b complex128) complex128 { return a * b })
				allreduceCase(t, n, 9*count, Min, func(r, i int) uint8 { return uint8((r*131 + i*7) ^ (i >> 3)) },
					func(a, b uint8) uint8 { return min(a, b) })
			}
		})
	}
}

// TestInitBadYield: a malformed WEFT_YIELD is an error that names it, not
// a silent default.
func TestInitBadYield(t *testing.T) {
	for _, v := range []string{"PMI_FD", "PMI_PORT", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"} {
		t.Setenv(v, "")
	}
	t.Setenv("WEFT_YIELD", "soon")
	w, err := Init()
	if err == nil {
		w.Finalize()
		t.Fatal("Init accepted WEFT_YIELD=soon")
	}
	if !strings.Contains(err.Error(), "WEFT_YIELD") {
		t.Fatalf("error does not name WEFT_YIELD: %v", err)
	}
}
