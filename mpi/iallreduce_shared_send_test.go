package mpi

import (
	"fmt"
	"testing"
)

// TestIallreduceSharedSend: two large Iallreduces in flight with the
// same send buffer (a send buffer is only read, so MPI lets concurrent
// operations share it), the second waited first, a blocking Allreduce
// of the same send between; each recv must hold the sums.
func TestIallreduceSharedSend(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for _, n := range []int{2, 3, 4} {
		directRanks(t, n)
		if err := Run(n, sharedSendCase); err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}

func sharedSendCase(c *Comm) error {
	p, me := c.Size(), c.Rank()
	const n = 40000 // 320 KB: direct reads
	if !direct(c, 8*n, 8) || c.oversubscribed() {
		return fmt.Errorf("not direct")
	}
	send := make([]float64, n)
	for i := range send {
		send[i] = float64(me*7 + i)
	}
	r1, r2, r3 := make([]float64, n), make([]float64, n), make([]float64, n)
	q1, err := Iallreduce(c, send, r1, Sum)
	if err != nil {
		return err
	}
	q2, err := Iallreduce(c, send, r2, Sum)
	if err != nil {
		return err
	}
	if me == 0 {
		if _, err := q1.Wait(); err != nil {
			return fmt.Errorf("rank %d q1: %w", me, err)
		}
	}
	if err := Allreduce(c, send, r3, Sum); err != nil {
		return fmt.Errorf("rank %d allreduce: %w", me, err)
	}
	if _, err := q2.Wait(); err != nil {
		return fmt.Errorf("rank %d q2: %w", me, err)
	}
	if _, err := q1.Wait(); err != nil {
		return fmt.Errorf("rank %d q1: %w", me, err)
	}
	for i := range n {
		want := 0.0
		for r := range p {
			want += float64(r*7 + i)
		}
		for k, r := range [][]float64{r1, r2, r3} {
			if r[i] != want {
				return fmt.Errorf("rank %d: result %d [%d] = %v, want %v", me, k+1, i, r[i], want)
			}
		}
	}
	return nil
}
