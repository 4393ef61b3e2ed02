package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestRevSendrecvSameBuffer: two ranks swap a buffer with Sendrecv, the
// send and receive buffer being one slice (what MPI_Sendrecv_replace
// does). Each must end with the other's data, or the call must fail:
// never with a mix of the two.
func TestRevSendrecvSameBuffer(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for _, n := range []int{8, 4 << 10, 64 << 10, 1 << 20} {
		err := Run(2, func(c *Comm) error {
			peer := 1 - c.Rank()
			buf := make([]int64, n)
			for i := range buf {
				buf[i] = int64(c.Rank()*1_000_000_000 + i)
			}
			_, err := Sendrecv(c, buf, peer, 7, buf, peer, 7)
			if err != nil {
				if errors.Is(err, ErrArg) {
					return nil
				}
				return err
			}
			for i, v := range buf {
				if want := int64(peer*1_000_000_000 + i); v != want {
					return fmt.Errorf("rank %d: buf[%d] = %d after Sendrecv in place, want %d (the peer's)", c.Rank(), i, v, want)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%d int64s: %v", n, err)
		}
	}
}
