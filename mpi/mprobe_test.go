package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestMprobe: messages taken by Mprobe and Improbe, eager and by
// rendezvous, are received whole by Mrecv and Imrecv sized from their
// Status, and by no other receive; a Message is received once; a short
// buffer is ErrTruncate. Clean and under injected faults.
func TestMprobe(t *testing.T) {
	for _, faults := range faultCases {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "30s")
			sizes := []int{3, 100000, 0, 17} // int32s; 100000 goes by rendezvous
			err := Run(2, func(c *Comm) error {
				if c.Rank() == 1 {
					if _, err := Recv(c, make([]byte, 0), 0, 99); err != nil { // rank 0 has looked
						return err
					}
					for i, n := range sizes {
						b := make([]int32, n)
						for j := range b {
							b[j] = int32(i*1000000 + j)
						}
						if err := Send(c, b, 0, 10+i); err != nil {
							return err
						}
					}
					return Send(c, []int32{7}, 0, 50)
				}
				if found, _, _, err := c.Improbe(1, AnyTag); found || err != nil {
					return fmt.Errorf("Improbe before any message: %v %v", found, err)
				}
				if err := Send(c, []byte{}, 1, 99); err != nil {
					return err
				}
				for i, n := range sizes {
					var m *Message
					var st Status
					var err error
					if i%2 == 0 {
						m, st, err = c.Mprobe(1, AnyTag)
					} else {
						found := false
						for !found && err == nil {
							found, m, st, err = c.Improbe(AnySource, AnyTag)
						}
					}
					if err != nil {
						return err
					}
					if st.Tag != 10+i || st.Source != 1 || st.Count != 4*n {
						return fmt.Errorf("message %d: probed %+v, want tag %d and %d bytes", i, st, 10+i, 4*n)
					}
					// Taken out of matching: a receive for any message
					// gets the next one, not this.
					if i == 0 {
						if found, _, err := c.Iprobe(1, 10); found || err != nil {
							return fmt.Errorf("message 0 still probed after Mprobe: %v %v", found, err)
						}
					}
					b := make([]int32, st.Count/4)
					if i == 1 {
						q, err := Imrecv(m, b)
						if err != nil {
							return err
						}
						if st, err = q.Wait(); err != nil {
							return err
						}
					} else if st, err = Mrecv(m, b); err != nil {
						return err
					}
					if st.Count != n {
						return fmt.Errorf("message %d: received %d elements, want %d", i, st.Count, n)
					}
					for j := range b {
						if b[j] != int32(i*1000000+j) {
							return fmt.Errorf("message %d [%d] = %d", i, j, b[j])
						}
					}
					if _, err := Mrecv(m, b); !errors.Is(err, ErrArg) {
						return fmt.Errorf("second Mrecv of message %d: %v", i, err)
					}
				}
				m, _, err := c.Mprobe(1, 50)
				if err != nil {
					return err
				}
				if _, err := Mrecv(m, make([]int32, 0)); !errors.Is(err, ErrTruncate) {
					return fmt.Errorf("Mrecv into a short buffer: %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
