package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestRevCountPartialElement: a message of 6 bytes received into []int32
// is one and a half elements. MPI_Get_count gives MPI_UNDEFINED for it;
// a Status whose Count is 1 says 4 bytes came when 6 did, and the caller
// cannot tell. Either Count is -1 (undefined) or the receive fails. Eager
// and rendezvous sizes, through Recv, Irecv, Mrecv and Sendrecv.
func TestRevCountPartialElement(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	for _, nbytes := range []int{6, 1<<20 + 2} {
		err := Run(2, func(c *Comm) error {
			msg := make([]byte, nbytes)
			buf := make([]int32, nbytes/4+1)
			if c.Rank() == 1 {
				for tag := range 4 {
					if err := Send(c, msg, 0, tag); err != nil {
						return err
					}
				}
				_, err := Sendrecv(c, msg, 0, 4, []byte{}, 0, 5)
				return err
			}
			check := func(how string, st Status, err error) error {
				if err == nil && st.Count != -1 {
					return fmt.Errorf("%s of %d bytes into []int32: Count %d (%d bytes), no error; want Count -1 (MPI_UNDEFINED) or an error",
						how, nbytes, st.Count, 4*st.Count)
				}
				return nil
			}
			st, err := Recv(c, buf, AnySource, 0)
			if e := check("Recv", st, err); e != nil {
				return e
			}
			r, err := Irecv(c, buf, 1, AnyTag)
			if err != nil {
				return err
			}
			st, err = r.Wait()
			if e := check("Irecv", st, err); e != nil {
				return e
			}
			m, _, err := c.Mprobe(AnySource, AnyTag)
			if err != nil {
				return err
			}
			st, err = Mrecv(m, buf)
			if e := check("Mrecv", st, err); e != nil {
				return e
			}
			_, _ = Recv(c, buf, 1, 3)
			st, err = Sendrecv(c, []int32{}, 1, 5, buf, 1, 4)
			return check("Sendrecv", st, err)
		})
		if err != nil {
			t.Errorf("%d bytes: %v", nbytes, err)
		}
	}
}

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
