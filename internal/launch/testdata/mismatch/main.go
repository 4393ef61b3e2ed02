// Command mismatch calls Allreduce with a length that differs on the last
// rank (-a elements on the others, -b on it), then two Allreduces of a 1
// that agree. It prints, per rank, "rank R: mismatch: ERR", "rank R:
// after I: ERR" for each of the two that failed, and "rank R: sum S" (9
// when both succeeded on 3 ranks), and exits 0 unless Init or Finalize
// fails: the test reads what each rank reported. With -roots the
// mismatched call is instead an Ibcast whose every rank names itself
// root, followed by Barriers until one fails (three at most), whose
// error "rank R: mismatch: ERR" reports ("<nil>" if none failed).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	a := flag.Int("a", 1000, "elements on every rank but the last")
	b := flag.Int("b", 15, "elements on the last rank")
	roots := flag.Bool("roots", false, "Ibcast with every rank its own root, then Barriers until one fails")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mismatch:", err)
		os.Exit(1)
	}
	c := w.Comm()
	n := *a
	if c.Rank() == c.Size()-1 {
		n = *b
	}
	buf := make([]float64, n)
	if *roots {
		q, err := mpi.Ibcast(c, buf, c.Rank())
		if err == nil {
			_, err = q.Wait()
		}
		for i := 0; i < 3 && err == nil; i++ {
			err = c.Barrier()
		}
		fmt.Printf("rank %d: mismatch: %v\n", c.Rank(), err)
	} else {
		fmt.Printf("rank %d: mismatch: %v\n", c.Rank(), mpi.Allreduce(c, buf, buf, mpi.Sum))
	}
	v := []float64{1}
	for i := range 2 {
		if err := mpi.Allreduce(c, v, v, mpi.Sum); err != nil {
			fmt.Printf("rank %d: after %d: %v\n", c.Rank(), i+1, err)
		}
	}
	fmt.Printf("rank %d: sum %v\n", c.Rank(), v[0])
	if err := w.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, "mismatch:", err)
		os.Exit(1)
	}
}
