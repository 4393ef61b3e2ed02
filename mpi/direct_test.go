package mpi

import (
	"fmt"
	"hash/crc64"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// directRanks lets n goroutine ranks run without the oversubscribed
// tuning (spinning, as ranks with a core each do), and makes Allreduces
// of from 4 KiB reduce by direct reads, so that the cases stay small.
func directRanks(t *testing.T, n int) {
	t.Helper()
	t.Setenv("WEFT_DIRECT", "4096")
	prev := runtime.GOMAXPROCS(max(n, runtime.GOMAXPROCS(0)))
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

// TestAllreduceDirect: Allreduces that reduce by direct reads give the
// sequential result for several types, ops and rank counts, with counts
// that do not divide evenly.
func TestAllreduceDirect(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			directRanks(t, n)
			const count = 3001
			allreduceCase(t, n, count, Sum, func(r, i int) float64 { return float64((r+1)*(i%1000) - 7) },
				func(a, b float64) float64 { return a + b })
			allreduceCase(t, n, 3*count, Max, func(r, i int) int32 { return int32((r*7919 + i*31) % 1000) },
				func(a, b int32) int32 { return max(a, b) })
			allreduceCase(t, n, 2*count, Sum, func(r, i int) float32 { return float32(r - i%5) },
				func(a, b float32) float32 { return a + b })
		})
	}
}

// TestAllreduceDirectOversubscribed: with more ranks than processors,
// whose waiters block instead of spinning, large Allreduces still reduce
// by direct reads, and give the sequential result.
func TestAllreduceDirectOversubscribed(t *testing.T) {
	t.Setenv("WEFT_DIRECT", "4096")
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	for _, n := range []int{3, 4} {
		err := Run(n, func(c *Comm) error {
			if !c.w.oversub || !direct(c, 8192, 8) {
				return fmt.Errorf("rank %d: oversubscribed %v, direct reads for 8 KiB %v; want both", c.Rank(), c.w.oversub, direct(c, 8192, 8))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		allreduceCase(t, n, 3001, Sum, func(r, i int) float64 { return float64((r+1)*(i%1000) - 7) },
			func(a, b float64) float64 { return a + b })
	}
}

// TestAllreduceDirectInPlace: with send and recv the same buffer, and with
// random floats whose sum depends on the order of the additions, every
// rank ends with the same bits, close to the sum, and the reads were
// direct.
func TestAllreduceDirectInPlace(t *testing.T) {
	const n, count = 3, 40_000
	directRanks(t, n)
	contrib := make([][]float64, n)
	want := make([]float64, count)
	for r := range contrib {
		g := rand.New(rand.NewPCG(uint64(r), 9))
		contrib[r] = make([]float64, count)
		for i := range contrib[r] {
			contrib[r][i] = g.NormFloat64() * math.Pow(10, float64(g.IntN(12)-6))
			want[i] += contrib[r][i]
		}
	}
	sums := make([]uint64, n)
	err := Run(n, func(c *Comm) error {
		buf := append([]float64(nil), contrib[c.Rank()]...)
		if err := Allreduce(c, buf, buf, Sum); err != nil {
			return err
		}
		if c.dirCntr == nil {
			return fmt.Errorf("rank %d: the Allreduce did not read directly", c.Rank())
		}
		for i, v := range buf {
			if d := math.Abs(v - want[i]); d > 1e-9*math.Abs(want[i])+1e-300 {
				return fmt.Errorf("rank %d: element %d = %v, want about %v", c.Rank(), i, v, want[i])
			}
		}
		h := crc64.New(crc64.MakeTable(crc64.ECMA))
		for _, v := range buf {
			var b [8]byte
			for k := range b {
				b[k] = byte(math.Float64bits(v) >> (8 * k))
			}
			h.Write(b[:])
		}
		sums[c.Rank()] = h.Sum64()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range sums {
		if sums[r] != sums[0] {
			t.Fatalf("rank %d's result differs from rank 0's in its bits", r)
		}
	}
}

// TestAllreduceDirectShm: over the shared-memory device the reads are
// cross-memory attach, each checked against the replica of the peer's
// TPT: the result is right and the reads went that way.
func TestAllreduceDirectShm(t *testing.T) {
	const n, count = 2, 50_000
	directRanks(t, n)
	worlds := shmWorlds(t, n)
	if worlds[0].lc.SingleCopy() == 0 {
		t.Skip("cross-memory attach is refused here (ptrace policy): run as root or set kernel.yama.ptrace_scope=0")
	}
	errs := make(chan error, n)
	for _, w := range worlds {
		go func() {
			c := w.comm
			buf := make([]float64, count)
			for i := range buf {
				buf[i] = float64(c.Rank()*count + i)
			}
			got := make([]float64, count)
			for range 3 {
				if err := Allreduce(c, buf, got, Sum); err != nil {
					errs <- err
					return
				}
				for i, v := range got {
					if want := float64(count + 2*i); v != want {
						errs <- fmt.Errorf("rank %d: element %d = %v, want %v", c.Rank(), i, v, want)
						return
					}
				}
			}
			if c.dirCntr == nil {
				errs <- fmt.Errorf("rank %d: the Allreduce did not read directly", c.Rank())
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := worlds[0].lc.RDMAStats(); s.CMAReads == 0 {
		t.Errorf("no cross-memory reads counted: %+v", s)
	}
}
