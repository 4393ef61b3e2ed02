package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestAbortThenShm: an Ireduce that only its root refuses (short
// recv) is aborted; blocking collectives right after it (which the
// shared block would take) and a nonblocking one in flight across it
// still give the right results on every rank.
func TestAbortThenShm(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, n := range []int{2, 3, 4, 5} {
		for rep := 0; rep < 5; rep++ {
			err := Run(n, func(c *Comm) error {
				p, me := c.Size(), c.Rank()
				x := make([]int64, 100)
				for i := range x {
					x[i] = int64(me + i)
				}
				xr := make([]int64, 100)
				qa, err := Iallreduce(c, x, xr, Sum)
				if err != nil {
					return err
				}
				root := p - 1
				recv := make([]int64, 100)
				if me == root {
					recv = recv[:3]
				}
				q, err := Ireduce(c, x, recv, Sum, root)
				if err == nil {
					_, err = q.Wait()
				}
				if me == root && !errors.Is(err, ErrArg) {
					return fmt.Errorf("root: %v, want ErrArg", err)
				}
				for k := 0; k < 4; k++ {
					v := []int64{int64(me + k), int64(k)}
					if err := Allreduce(c, v, v, Sum); err != nil {
						return fmt.Errorf("rank %d allreduce %d: %w", me, k, err)
					}
					if v[0] != int64(p*(p-1)/2+p*k) || v[1] != int64(p*k) {
						return fmt.Errorf("rank %d allreduce %d: %v", me, k, v)
					}
					b := []int32{0}
					if me == k%p {
						b[0] = int32(k + 10)
					}
					if err := Bcast(c, b, k%p); err != nil {
						return err
					}
					if b[0] != int32(k+10) {
						return fmt.Errorf("rank %d bcast %d: %v", me, k, b)
					}
				}
				if _, err := qa.Wait(); err != nil {
					return fmt.Errorf("rank %d iallreduce: %w", me, err)
				}
				for i := range xr {
					if xr[i] != int64(p*(p-1)/2+p*i) {
						return fmt.Errorf("rank %d iallreduce [%d] = %d", me, i, xr[i])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%d ranks: %v", n, err)
			}
		}
	}
}
