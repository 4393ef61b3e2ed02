package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestRevNilComm: Split gives a rank of negative color nil, MPI's
// MPI_COMM_NULL. Free takes it with ErrArg (comm.go), but every other
// call on it panics. "Every input can be wrong: clear error, nothing
// panics" (house rules); MPI gives MPI_ERR_COMM.
func TestRevNilComm(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	calls := []struct {
		name string
		f    func(c *Comm) error
	}{
		{"Barrier", func(c *Comm) error { return c.Barrier() }},
		{"Send", func(c *Comm) error { return Send(c, []int32{1}, 0, 0) }},
		{"Recv", func(c *Comm) error { _, err := Recv(c, []int32{1}, 0, 0); return err }},
		{"Iprobe", func(c *Comm) error { _, _, err := c.Iprobe(AnySource, AnyTag); return err }},
		{"Allreduce", func(c *Comm) error { b := []int32{1}; return Allreduce(c, b, b, Sum) }},
		{"Dup", func(c *Comm) error { _, err := c.Dup(); return err }},
	}
	for _, call := range calls {
		err := Run(2, func(c *Comm) error {
			d, err := c.Split(-1, 0)
			if err != nil || d != nil {
				return fmt.Errorf("Split(-1): %v, %v", d, err)
			}
			if err := d.Free(); !errors.Is(err, ErrArg) {
				return fmt.Errorf("Free of nil: %v", err)
			}
			if err := call.f(d); !errors.Is(err, ErrArg) {
				return fmt.Errorf("%s on the nil communicator: %v, want ErrArg", call.name, err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", call.name, err)
		}
	}
}
