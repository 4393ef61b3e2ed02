package mpi

import (
	"bytes"
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
			for n := 1; n <= 9; n++ {
				if faults != "" && n%3 != 0 {
					continue
				}
				if err := Run(n, func(c *Comm) error { return bcastRDMACase(c) }); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
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
			if c.Size() > 2 && !comm.bcastRDMA(size) {
				return fmt.Errorf("%d bytes did not go by broadcast RDMA", size)
			}
		}
	}
	return nil
}
