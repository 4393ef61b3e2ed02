package mpi

import (
	"fmt"
	"testing"
)

// TestIallreduceLarge: several large Iallreduces in flight at once
// (direct reads, ring; in place and not) completed by WaitAny, TestAll
// and WaitSome, under faults, against the sums the ranks' data gives.
func TestIallreduceLarge(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	for _, faults := range []string{"", "loss=0.05,reorder=0.1,dup=0.02,seed=7"} {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for _, n := range []int{2, 3, 5} {
				directRanks(t, n)
				if err := Run(n, iallreduceLargeCase); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

func iallreduceLargeCase(c *Comm) error {
	p, me := c.Size(), c.Rank()
	sizes := []int{40001, 10001, 30000, 9, 0}
	var reqs []*Request
	var outs [][]float64
	for k, n := range sizes {
		send := make([]float64, n)
		for i := range send {
			send[i] = float64(me*1000 + i + k)
		}
		recv := send
		if k%2 == 1 {
			recv = make([]float64, n)
		}
		q, err := Iallreduce(c, send, recv, Sum)
		if err != nil {
			return err
		}
		reqs, outs = append(reqs, q), append(outs, recv)
	}
	// p2p between
	nx := []int32{int32(me)}
	got := []int32{-1}
	r1, err := Irecv(c, got, (me-1+p)%p, 9)
	if err != nil {
		return err
	}
	if err := Send(c, nx, (me+1)%p, 9); err != nil {
		return err
	}
	if _, err := r1.Wait(); err != nil {
		return err
	}
	left := len(reqs)
	for left > 0 {
		if me%2 == 0 {
			idx, _, errs := WaitSome(reqs...)
			for j, i := range idx {
				if errs[j] != nil {
					return errs[j]
				}
				reqs[i] = nil
				left--
			}
		} else {
			i, _, err := WaitAny(reqs...)
			if err != nil {
				return err
			}
			reqs[i] = nil
			left--
		}
	}
	for k, n := range sizes {
		for i := 0; i < n; i++ {
			want := 0.0
			for r := range p {
				want += float64(r*1000 + i + k)
			}
			if outs[k][i] != want {
				return fmt.Errorf("rank %d: size %d [%d] = %v, want %v", me, n, i, outs[k][i], want)
			}
		}
	}
	return nil
}
