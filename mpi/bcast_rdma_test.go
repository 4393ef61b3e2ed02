package mpi

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestBcastRDMA: broadcasts large enough to go by lapi's broadcast RDMA
// (1 MiB and more, lengths that are not a whole number of chunks) from
// every root arrive byte-exact at 1-9 ranks, back to back on one
// communicator (each call is its own broadcast), on a duplicate too, and
// under injected faults (loss, reordering, duplication, corruption).
func TestBcastRDMA(t *testing.T) {
	for _, faults := range faultCases {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "120s")
			var tally faultTally
			for n := 1; n <= 9; n++ {
				if faults != "" && n%3 != 0 {
					continue
				}
				if err := Run(n, tally.body(bcastRDMACase)); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
			tally.check(t, faults)
		})
	}
}

// TestBcastRDMARootMismatch: when the last rank names another root than
// the others for a broadcast RDMA carries, no rank hangs, every rank
// returns nil or an error wrapping ErrArg that names the disagreement,
// and the communicator goes on: of two Allreduces after, the first may
// fail with ErrArg (a rank that finished the bad call may not have heard
// of its abort), the second is exact everywhere.
func TestBcastRDMARootMismatch(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for n := 3; n <= 6; n++ {
		errs, after := make([]error, n), make([]error, n)
		err := Run(n, func(c *Comm) error {
			root := 0
			if c.Rank() == n-1 {
				root = 1
			}
			errs[c.Rank()] = Bcast(c, make([]byte, bcastRDMALarge), root)
			after[c.Rank()] = allreducesAfter(c)
			return nil
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
		for r, e := range errs {
			if e != nil && (!errors.Is(e, ErrArg) || errors.Is(e, ErrTimeout)) {
				t.Errorf("%d ranks: rank %d: %v, want ErrArg", n, r, e)
			}
			if after[r] != nil {
				t.Errorf("%d ranks: rank %d: %v", n, r, after[r])
			}
		}
	}
}

func bcastRDMACase(c *Comm) error {
	d, err := c.Dup()
	if err != nil {
		return err
	}
	for i, size := range []int{bcastRDMALarge, bcastRDMALarge + 12345, 3*bcastRDMAChunk + bcastRDMALarge + 1} {
		for _, comm := range []*Comm{c, d} {
			root := (i + 3) % c.Size()
			want := make([]byte, size)
			for k := range want {
				want[k] = byte(k*7 + i + root)
			}
			buf := make([]byte, size)
			if c.Rank() == root {
				copy(buf, want)
			}
			if err := Bcast(comm, buf, root); err != nil {
				return err
			}
			if !bytes.Equal(buf, want) {
				return fmt.Errorf("rank %d: %d bytes from root %d differ", c.Rank(), size, root)
			}
			if c.Size() > 2 && size < bcastSingleCopyMax && !bcastRDMA(comm, size) {
				return fmt.Errorf("%d bytes did not go by broadcast RDMA", size)
			}
		}
	}
	return nil
}

// BenchmarkBcastLarge times Bcasts of 1, 4 and 16 MiB from root 0 on 4
// and 8 goroutine ranks, by broadcast RDMA and by the scatter-allgather
// it replaces (WEFT_BCAST_RDMA=0).
func BenchmarkBcastLarge(b *testing.B) {
	for _, n := range []int{4, 8} {
		for _, size := range []int{1 << 20, 4 << 20, 16 << 20} {
			for _, mode := range []string{"rdma", "old"} {
				b.Run(fmt.Sprintf("n=%d/%dMiB/%s", n, size>>20, mode), func(b *testing.B) {
					if mode == "old" {
						b.Setenv("WEFT_BCAST_RDMA", "0")
					}
					b.SetBytes(int64(size))
					bufs := make([][]byte, n)
					benchRanks(b, n, func(c *Comm) error {
						bufs[c.Rank()] = make([]byte, size)
						return nil
					}, func(c *Comm) error { return Bcast(c, bufs[c.Rank()], 0) })
				})
			}
		}
	}
}
