package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestIcollAbortOfFreedComm: an Ibcast on a Dup freed while it is in
// flight (Free with requests in flight is allowed: TestIcollFreeInFlight),
// whose rank 2 passes the wrong length. Rank 2's receive fails, so rank 2
// never forwards to rank 3; rank 3 must hear of the abort and fail with
// ErrArg. It waited until WEFT_TIMEOUT (helper-71's review): Free had
// unlinked the communicator, and the abort was dropped. It now stays
// linked until its last nonblocking call completes.
func TestIcollAbortOfFreedComm(t *testing.T) { icollAbortCase(t, true) }

// TestIcollAbortOfNewComm: the same with the Dup freed only after the
// Wait. Rank 2's abort could reach rank 3 before rank 3's Dup had made
// the communicator, and was dropped (rank 3 waited until WEFT_TIMEOUT);
// it is now kept for it (World.pendingAborts).
func TestIcollAbortOfNewComm(t *testing.T) { icollAbortCase(t, false) }

// icollAbortCase runs the mismatched Ibcast on a new Dup of 4 ranks,
// freeing the Dup while the Ibcast is in flight (freeEarly) or after it.
func icollAbortCase(t *testing.T, freeEarly bool) {
	t.Setenv("WEFT_TIMEOUT", "5s")
	err := Run(4, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		n := 4
		if c.Rank() == 2 {
			n = 5
		}
		q, err := Ibcast(d, make([]int32, n), 0)
		if freeEarly {
			if ferr := d.Free(); ferr != nil {
				return ferr
			}
		}
		if err == nil { // else the abort was heard before the call began
			_, err = q.Wait()
		}
		if err := abortedAsWanted(c.Rank(), err); err != nil || freeEarly {
			return err
		}
		return d.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// abortedAsWanted checks a rank's outcome of the mismatched Ibcast: ranks
// 2 (whose length is wrong) and 3 (which it feeds) fail with ErrArg; ranks
// 0 and 1 may finish first or hear the abort.
func abortedAsWanted(rank int, err error) error {
	if rank >= 2 && !errors.Is(err, ErrArg) || err != nil && !errors.Is(err, ErrArg) {
		return fmt.Errorf("rank %d: %v, want ErrArg", rank, err)
	}
	return nil
}
