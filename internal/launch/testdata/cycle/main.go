// Command cycle deadlocks a job on its last rank, for the snapshots'
// summary: rank 1 sends the last rank 8 bytes with tag 3, which it
// receives, and 8 bytes with tag 5, which stay unexpected, then every rank but the last enters Barrier while the last
// receives from rank 0 with tag 7, a message rank 0, in the Barrier, never
// sends. Rank 0 waits for the last rank, which waits for rank 0: a cycle,
// whose culprit is the last rank, out of the collective the others are
// in. With -fail the last rank exits with status 3 instead of receiving
// from rank 0, once every other rank has told it (tag 11) that it is on its
// way into the Barrier. Each rank prints "rank R: hanging" first.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	fail := flag.Bool("fail", false, "the last rank exits with status 3 instead of waiting")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cycle:", err)
		os.Exit(1)
	}
	c := w.Comm()
	last := c.Size() - 1
	buf := make([]byte, 8)
	if c.Rank() == 1 {
		if err = mpi.Send(c, buf, last, 3); err == nil {
			err = mpi.Send(c, buf, last, 5)
		}
	}
	if c.Rank() == last && err == nil {
		_, err = mpi.Recv(c, buf, 1, 3)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cycle: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	if *fail {
		// The last rank fails only once every other rank is past Init
		// and on its way into the Barrier, so that each can answer
		// gorun's question for its snapshot.
		if c.Rank() != last {
			err = mpi.Send(c, buf, last, 11)
		} else {
			for r := 0; r < last && err == nil; r++ {
				_, err = mpi.Recv(c, buf, r, 11)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cycle: rank %d: %v\n", c.Rank(), err)
			os.Exit(1)
		}
	}
	fmt.Printf("rank %d: hanging\n", c.Rank())
	switch {
	case c.Rank() == last && *fail:
		fmt.Fprintf(os.Stderr, "cycle: rank %d: failing\n", c.Rank())
		os.Exit(3)
	case c.Rank() == last:
		_, err = mpi.Recv(c, buf, 0, 7)
	default:
		err = c.Barrier()
	}
	fmt.Fprintf(os.Stderr, "cycle: rank %d: the hang ended: %v\n", c.Rank(), err)
	os.Exit(1)
}
