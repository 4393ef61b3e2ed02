package mpi

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// putCollSizes are block sizes for the Put collectives' tests: odd ones,
// by packets (below the 16 KiB single-copy size between goroutines) and
// by single copies, and one past the default thresholds.
var putCollSizes = []int{1, 4097, 70001, max(allgatherRDMALarge, alltoallRDMALarge) + 13}

// TestPutCollectives: Allgather and Alltoall by Puts place every byte
// where it belongs for 1-9 ranks and odd block sizes, back to back on a
// communicator and its duplicate, clean and under injected faults (loss,
// reordering, duplication, corruption). The thresholds are 1 byte, so
// every size goes by Puts (the shared block, which would carry the 1-byte
// blocks, is off); the last size would by default too.
func TestPutCollectives(t *testing.T) {
	for _, faults := range faultCases {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "120s")
			t.Setenv("WEFT_SHMCOLL", "off")
			t.Setenv("WEFT_ALLGATHER_RDMA", "1")
			t.Setenv("WEFT_ALLTOALL_RDMA", "1")
			for n := 1; n <= 9; n++ {
				if faults != "" && n%3 != 0 {
					continue
				}
				if err := Run(n, func(c *Comm) error { return putCollCase(c, 1) }); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

// TestPutCollectivesDefault: with the default thresholds, blocks from
// them go by Puts and blocks below them do not; without single copies
// (on one host), blocks from putCollOneHostMax do not either.
func TestPutCollectivesDefault(t *testing.T) {
	clearEnv(t)
	t.Setenv("WEFT_TIMEOUT", "60s")
	err := Run(3, func(c *Comm) error {
		for _, n := range []int{allgatherRDMALarge - 1, allgatherRDMALarge} {
			if got, want := c.allgatherPut(n), n >= allgatherRDMALarge; got != want {
				return fmt.Errorf("Allgather of %d bytes by Puts: %v, want %v", n, got, want)
			}
		}
		for _, n := range []int{alltoallRDMALarge - 1, alltoallRDMALarge} {
			if got, want := c.alltoallPut(n), n >= alltoallRDMALarge; got != want {
				return fmt.Errorf("Alltoall of %d bytes by Puts: %v, want %v", n, got, want)
			}
		}
		return putCollCase(c, min(allgatherRDMALarge, alltoallRDMALarge))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without single copies, on one host, blocks from putCollOneHostMax
	// keep the ring and the pairwise exchange.
	t.Setenv("WEFT_SINGLECOPY", "-1")
	err = Run(3, func(c *Comm) error {
		for _, n := range []int{putCollOneHostMax - 1, putCollOneHostMax} {
			want := n < putCollOneHostMax
			if c.allgatherPut(n) != want || c.alltoallPut(n) != want {
				return fmt.Errorf("without single copies, blocks of %d bytes by Puts: %v, %v; want %v", n, c.allgatherPut(n), c.alltoallPut(n), want)
			}
		}
		return putCollCase(c, min(allgatherRDMALarge, alltoallRDMALarge))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// putCollCase runs an Allgather and an Alltoall of each of putCollSizes
// on c and on a duplicate, and checks every block and that blocks from
// least bytes went by Puts.
func putCollCase(c *Comm, least int) error {
	d, err := c.Dup()
	if err != nil {
		return err
	}
	defer d.Free()
	p, me := c.Size(), c.Rank()
	val := func(from, to, n, k int) byte { return byte(k*7 + from*31 + to*3 + n) }
	for _, n := range putCollSizes {
		for ci, comm := range []*Comm{c, d} {
			send := make([]byte, n)
			for k := range send {
				send[k] = val(me, 0, n+ci, k)
			}
			recv := make([]byte, p*n)
			if err := Allgather(comm, send, recv); err != nil {
				return fmt.Errorf("allgather of %d bytes: %w", n, err)
			}
			for q := range p {
				for k := range n {
					if got, want := recv[q*n+k], val(q, 0, n+ci, k); got != want {
						return fmt.Errorf("rank %d: allgather of %d bytes: block %d [%d] = %d, want %d", me, n, q, k, got, want)
					}
				}
			}
			send = make([]byte, p*n)
			for q := range p {
				for k := range n {
					send[q*n+k] = val(me, q, n+ci, k)
				}
			}
			recv = make([]byte, p*n)
			if err := Alltoall(comm, send, recv); err != nil {
				return fmt.Errorf("alltoall of %d bytes: %w", n, err)
			}
			for q := range p {
				for k := range n {
					if got, want := recv[q*n+k], val(q, me, n+ci, k); got != want {
						return fmt.Errorf("rank %d: alltoall of %d bytes: block from %d [%d] = %d, want %d", me, n, q, k, got, want)
					}
				}
			}
			if p > 1 && n >= least && (!comm.allgatherPut(n) || !comm.alltoallPut(n)) {
				return fmt.Errorf("%d bytes did not go by Puts", n)
			}
		}
	}
	return nil
}

// TestPutCollectivesMismatch: when the last rank's block differs from the
// others' (both sizes by Puts, or its size below the threshold, so that
// it takes the ring or the pairwise exchange), no rank hangs, every rank
// returns an error wrapping ErrArg, and the communicator goes on
// (checkMismatch). The shared block is off: it would carry blocks of up
// to 2 KiB, the others' Allgather among them.
func TestPutCollectivesMismatch(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	t.Setenv("WEFT_SHMCOLL", "off")
	t.Setenv("WEFT_ALLGATHER_RDMA", "1024")
	t.Setenv("WEFT_ALLTOALL_RDMA", "1024")
	for _, odd := range []int{375, 12} { // float64s: 3000 and 96 bytes against 2000
		for _, kind := range []string{"Allgather", "Alltoall"} {
			for n := 2; n <= 5; n++ {
				checkMismatch(t, n, kind, [2]int{250, odd})
			}
		}
	}
}

// TestPutCollectivesPeerFailed: a member that fails instead of calling
// fails the others' Allgather and Alltoall by Puts with ErrPeerFailed
// naming it (or with the abort of a member that saw it first, which
// names it), not a hang (the timeout, which would end one, is refused).
func TestPutCollectivesPeerFailed(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	t.Setenv("WEFT_ALLGATHER_RDMA", "1")
	t.Setenv("WEFT_ALLTOALL_RDMA", "1")
	for _, kind := range []string{"allgather", "alltoall"} {
		errs := make([]error, 4)
		var mu sync.Mutex
		err := Run(4, func(c *Comm) error {
			if c.Rank() == 2 {
				return errors.New("rank 2 gives up")
			}
			const b = 100000
			var err error
			if kind == "allgather" {
				err = Allgather(c, make([]byte, b), make([]byte, 4*b))
			} else {
				err = Alltoall(c, make([]byte, 4*b), make([]byte, 4*b))
			}
			mu.Lock()
			errs[c.Rank()] = err
			mu.Unlock()
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "rank 2 gives up") {
			t.Errorf("%s: Run: %v, want rank 2's error", kind, err)
		}
		for r, e := range errs {
			// A member may hear first of another's abort of the call,
			// which carries the cause: ErrPeerFailed either way.
			if r != 2 && (!errors.Is(e, ErrPeerFailed) || !strings.Contains(e.Error(), "rank 2")) {
				t.Errorf("%s: rank %d: %v, want ErrPeerFailed naming rank 2", kind, r, e)
			}
		}
	}
}

// BenchmarkPutCollectives times Allgathers and Alltoalls of 16 KiB to
// 4 MiB blocks on 4 and 8 goroutine ranks, by Puts ("put": thresholds of
// 1 byte) and by the ring or pairwise exchange ("old": thresholds off).
func BenchmarkPutCollectives(b *testing.B) {
	for _, kind := range []string{"allgather", "alltoall"} {
		for _, n := range []int{4, 8} {
			for _, size := range []int{16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20} {
				for _, mode := range []string{"put", "old"} {
					b.Run(fmt.Sprintf("%s/n=%d/%dKiB/%s", kind, n, size>>10, mode), func(b *testing.B) {
						v := map[string]string{"put": "1", "old": "0"}[mode]
						b.Setenv("WEFT_ALLGATHER_RDMA", v)
						b.Setenv("WEFT_ALLTOALL_RDMA", v)
						b.SetBytes(int64(size * n))
						send, recv := make([][]byte, n), make([][]byte, n)
						benchRanks(b, n, func(c *Comm) error {
							if kind == "allgather" {
								send[c.Rank()] = make([]byte, size)
							} else {
								send[c.Rank()] = make([]byte, size*n)
							}
							recv[c.Rank()] = make([]byte, size*n)
							return nil
						}, func(c *Comm) error {
							if kind == "allgather" {
								return Allgather(c, send[c.Rank()], recv[c.Rank()])
							}
							return Alltoall(c, send[c.Rank()], recv[c.Rank()])
						})
					})
				}
			}
		}
	}
}
