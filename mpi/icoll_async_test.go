package mpi

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
)

// TestIcollAsyncLarge: a root starts large nonblocking collectives
// (split rendezvous sizes) and then makes no mpi call until every other
// rank has completed them: the progress goroutine alone must answer for
// the root.
func TestIcollAsyncLarge(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, n := range []int{2, 3, 4} {
		prev := runtime.GOMAXPROCS(max(n+1, runtime.GOMAXPROCS(0)))
		var finished, failed atomic.Int32
		err := Run(n, func(c *Comm) error {
			p, me := c.Size(), c.Rank()
			const m = 1 << 19 // 4 MiB of float64
			b := make([]float64, m)
			if me == 0 {
				for i := range b {
					b[i] = float64(i)
				}
			}
			q1, err := Ibcast(c, b, 0)
			if err != nil {
				return err
			}
			s := make([]int64, m/4)
			for i := range s {
				s[i] = int64(me*7 + i)
			}
			var g []int64
			if me == 0 {
				g = make([]int64, p*len(s))
			}
			q2, err := Igather(c, s, g, 0)
			if err != nil {
				return err
			}
			if me == 0 {
				for finished.Load() < int32(p-1) && failed.Load() == 0 {
					runtime.Gosched() // computing: no mpi call
				}
			} else {
				_, err1 := q1.Wait()
				_, err2 := q2.Wait()
				if err1 != nil || err2 != nil {
					failed.Add(1)
					return fmt.Errorf("rank %d: %v %v", me, err1, err2)
				}
				finished.Add(1)
			}
			if _, err := q1.Wait(); err != nil {
				return err
			}
			if _, err := q2.Wait(); err != nil {
				return err
			}
			for i := range b {
				if b[i] != float64(i) {
					return fmt.Errorf("rank %d: b[%d] = %v", me, i, b[i])
				}
			}
			if me == 0 {
				for r := range p {
					for i := range s {
						if g[r*len(s)+i] != int64(r*7+i) {
							return fmt.Errorf("gather [%d][%d] = %d", r, i, g[r*len(s)+i])
						}
					}
				}
			}
			return nil
		})
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}
