package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestCallsAfterFinalize: every call after Finalize fails with an error
// wrapping ErrFinalized, whatever path the call would take (a copied,
// an uncopied and a rendezvous send, blocking or not), instead of
// returning nil or reaching a device that may be gone; on one rank too,
// where a collective needs no communication.
func TestCallsAfterFinalize(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "5s") // a call that waits for a finalized peer fails instead of hanging
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { callsAfterFinalize(t, n) })
	}
}

func callsAfterFinalize(t *testing.T, n int) {
	err := Run(n, func(c *Comm) error {
		if err := c.World().Finalize(); err != nil {
			return err
		}
		peer := (c.Rank() + 1) % n
		small, mid, big := make([]int64, 1), make([]int64, 6<<10), make([]int64, 80<<10)
		var q Request
		calls := map[string]func() error{
			"Finalize":        func() error { return c.World().Finalize() },
			"Barrier":         c.Barrier,
			"Dup":             func() error { _, err := c.Dup(); return err },
			"Split":           func() error { _, err := c.Split(0, 0); return err },
			"Probe":           func() error { _, err := c.Probe(peer, 0); return err },
			"SendObj":         func() error { return c.SendObj("x", peer, 0) },
			"RecvObj":         func() error { var s string; _, err := c.RecvObj(&s, peer, 0); return err },
			"Recv":            func() error { _, err := Recv(c, small, peer, 0); return err },
			"Irecv":           func() error { _, err := Irecv(c, small, peer, 0); return err },
			"IrecvInto":       func() error { return IrecvInto(&q, c, small, peer, 0) },
			"Sendrecv":        func() error { _, err := Sendrecv(c, small, peer, 0, small, peer, 0); return err },
			"Bcast":           func() error { return Bcast(c, small, 0) },
			"Reduce":          func() error { return Reduce(c, small, make([]int64, 1), Sum, 0) },
			"Allreduce":       func() error { return Allreduce(c, small, make([]int64, 1), Sum) },
			"Allreduce/large": func() error { return Allreduce(c, big, make([]int64, len(big)), Sum) },
			"Gather":          func() error { return Gather(c, small, make([]int64, n), 0) },
			"Scatter":         func() error { return Scatter(c, make([]int64, n), small, 0) },
			"Allgather":       func() error { return Allgather(c, small, make([]int64, n)) },
			"Alltoall":        func() error { return Alltoall(c, make([]int64, n), make([]int64, n)) },
		}
		for name, buf := range map[string][]int64{"copied": small, "uncopied": mid, "rendezvous": big} {
			calls["Send/"+name] = func() error { return Send(c, buf, peer, 0) }
			calls["Isend/"+name] = func() error { _, err := Isend(c, buf, peer, 0); return err }
			calls["IsendInto/"+name] = func() error { var q Request; return IsendInto(&q, c, buf, peer, 0) }
			calls["Send/self/"+name] = func() error { return Send(c, buf, c.Rank(), 0) }
		}
		var errs []error
		for name, call := range calls {
			if err := call(); !errors.Is(err, ErrFinalized) {
				errs = append(errs, fmt.Errorf("rank %d: %s after Finalize returned %v, want ErrFinalized", c.Rank(), name, err))
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		t.Fatal(err)
	}
}
