// Command collcheck runs Barrier, Allreduce, Bcast, Reduce, Allgather,
// Gather, Scatter and Alltoall for many rounds with every root and sizes around the shared-memory slot, then
// large Allreduces, checks every result, and prints "collcheck ok: R
// rounds on N ranks" at rank 0.
// Every few rounds one rank computes for a while first, so that the
// others' waits outlast their spin and yield and block: a lost wake-up
// shows as a WEFT_TIMEOUT error.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	rounds := flag.Int("rounds", 200, "rounds")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "collcheck:", err)
		os.Exit(1)
	}
	c := w.Comm()
	err = check(c, *rounds)
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "collcheck: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	if c.Rank() == 0 {
		fmt.Printf("collcheck ok: %d rounds on %d ranks\n", *rounds, c.Size())
	}
}

func check(c *mpi.Comm, rounds int) error {
	n, me := c.Size(), c.Rank()
	for i := range rounds {
		elems := []int{1, 7, 256, 257, 1024}[i%5] // 2 KiB is the slot
		root := i % n
		if i%25 == 22 && me == root { // a round of 2 KiB: the shared path
			busy(5 * time.Millisecond) // the others block, and must be woken
		}
		send := make([]float64, elems)
		for e := range send {
			send[e] = float64(me*1000 + e + i)
		}
		got := make([]float64, elems)
		if err := mpi.Allreduce(c, send, got, mpi.Sum); err != nil {
			return err
		}
		for e, v := range got {
			if want := float64(1000*n*(n-1)/2 + n*(e+i)); v != want {
				return fmt.Errorf("round %d: allreduce element %d = %v, want %v", i, e, v, want)
			}
		}
		b := make([]float64, elems)
		if me == root {
			copy(b, send)
		}
		if err := mpi.Bcast(c, b, root); err != nil {
			return err
		}
		for e, v := range b {
			if want := float64(root*1000 + e + i); v != want {
				return fmt.Errorf("round %d: bcast from %d element %d = %v, want %v", i, root, e, v, want)
			}
		}
		if err := mpi.Reduce(c, send, got, mpi.Min, root); err != nil {
			return err
		}
		if me == root {
			for e, v := range got {
				if want := float64(e + i); v != want {
					return fmt.Errorf("round %d: reduce to %d element %d = %v, want %v", i, root, e, v, want)
				}
			}
		}
		if err := movers(c, i, elems/8+1, root); err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
	}
	// Large Allreduces, which within a node read the peers' buffers
	// directly, registering them for each call: the keys must reach the
	// peers' TPT replicas before the PVOs do.
	for i := range 20 {
		elems := []int{16 << 10, 32 << 10}[i%2] // 128 and 256 KiB
		send := make([]float64, elems)
		for e := range send {
			send[e] = float64(me + e + i)
		}
		if err := mpi.Allreduce(c, send, send, mpi.Sum); err != nil {
			return err
		}
		for e, v := range send {
			if want := float64(n*(n-1)/2 + n*(e+i)); v != want {
				return fmt.Errorf("large round %d: allreduce element %d = %v, want %v", i, e, v, want)
			}
		}
	}
	return nil
}

// busy computes for d without giving up the processor.
func busy(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// movers runs Allgather, Gather, Scatter and Alltoall in round i with
// blocks of k elements, block (from, to) element e holding val(from, to, e).
func movers(c *mpi.Comm, i, k, root int) error {
	n, me := c.Size(), c.Rank()
	val := func(from, to, e int) int32 { return int32(from<<20 | to<<12 | (e+i)&0xfff) }
	mine := make([]int32, k)
	blocks := make([]int32, n*k) // block q for rank q
	for e := range k {
		mine[e] = val(me, 0, e)
		for q := range n {
			blocks[q*k+e] = val(me, q, e)
		}
	}
	all := make([]int32, n*k)
	check := func(what string, want func(q, e int) int32) error {
		for q := range n {
			for e := range k {
				if g, w := all[q*k+e], want(q, e); g != w {
					return fmt.Errorf("round %d: %s: block %d element %d = %#x, want %#x", i, what, q, e, g, w)
				}
			}
		}
		return nil
	}
	if err := mpi.Allgather(c, mine, all); err != nil {
		return err
	}
	if err := check("allgather", func(q, e int) int32 { return val(q, 0, e) }); err != nil {
		return err
	}
	clear(all)
	if err := mpi.Gather(c, mine, all, root); err != nil {
		return err
	}
	if me == root {
		if err := check("gather", func(q, e int) int32 { return val(q, 0, e) }); err != nil {
			return err
		}
	}
	if err := mpi.Scatter(c, blocks, mine, root); err != nil {
		return err
	}
	for e, g := range mine {
		if w := val(root, me, e); g != w {
			return fmt.Errorf("round %d: scatter from %d element %d = %#x, want %#x", i, root, e, g, w)
		}
	}
	if err := mpi.Alltoall(c, blocks, all); err != nil {
		return err
	}
	return check("alltoall", func(q, e int) int32 { return val(q, me, e) })
}
