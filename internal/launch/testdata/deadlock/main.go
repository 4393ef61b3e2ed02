// Command deadlock hangs, each rank in its own way, for gorun --timeout's
// report and the snapshots' summary: rank 0 receives from rank 1 with tag
// 7, rank 1 enters Barrier (rank 0 waits for rank 1, which waits for rank
// 0: a cycle), rank 2 sends rank 0 a message of 8 bytes with tag 9, which
// stays unexpected there, then sleeps outside MPI, and rank 3 and above
// sleep with gorun's question ignored (they cannot answer). Each prints
// "rank R: hanging" first.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/weft-hpc/weft/internal/pmi"
	"github.com/weft-hpc/weft/mpi"
)

func main() {
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deadlock:", err)
		os.Exit(1)
	}
	c := w.Comm()
	fmt.Printf("rank %d: hanging\n", c.Rank())
	switch c.Rank() {
	case 0:
		buf := make([]byte, 8)
		_, err = mpi.Recv(c, buf, 1, 7)
	case 1:
		err = c.Barrier()
	case 2:
		if err = mpi.Send(c, make([]byte, 8), 0, 9); err == nil {
			time.Sleep(time.Hour)
		}
	default:
		signal.Ignore(pmi.AskSignal)
		time.Sleep(time.Hour)
	}
	fmt.Fprintf(os.Stderr, "deadlock: rank %d: the hang ended: %v\n", c.Rank(), err)
	os.Exit(1)
}
