// Command pairping ping-pongs -n 8-byte messages between two ranks (-a
// and -b) while the others wait in a barrier, then checks every reply.
// Rank a prints what each of its devices carried (World.Stats), and with
// gorun --trace 2 every rank's devices report it too, so a test can see
// which device a pair's messages took.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	n := flag.Int("n", 2000, "round trips")
	a := flag.Int("a", 0, "one rank of the pair")
	b := flag.Int("b", 1, "the other")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pairping:", err)
		os.Exit(1)
	}
	c := w.Comm()
	err = run(c, *n, *a, *b)
	if c.Rank() == *a {
		// What each device carried, from the API (World.Stats).
		for _, d := range w.Stats().Devices {
			fmt.Printf("stats %s toward %v: sent %d frames\n", d.Name, d.Peers, d.FramesSent)
		}
	}
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pairping: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	if c.Rank() == *a {
		fmt.Printf("pairping ok: %d round trips between ranks %d and %d\n", *n, *a, *b)
	}
}

func run(c *mpi.Comm, n, a, b int) error {
	me := c.Rank()
	buf := make([]uint64, 1)
	for i := range n {
		switch me {
		case a:
			buf[0] = uint64(i)
			if err := mpi.Send(c, buf, b, 1); err != nil {
				return err
			}
			if _, err := mpi.Recv(c, buf, b, 2); err != nil {
				return err
			}
			if buf[0] != uint64(i)+1 {
				return fmt.Errorf("round %d: reply %d", i, buf[0])
			}
		case b:
			if _, err := mpi.Recv(c, buf, a, 1); err != nil {
				return err
			}
			buf[0]++
			if err := mpi.Send(c, buf, a, 2); err != nil {
				return err
			}
		}
	}
	return c.Barrier()
}
