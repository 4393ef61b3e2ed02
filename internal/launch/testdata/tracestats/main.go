// Command tracestats is the rank of gorun's --stats and trace-level tests.
// Rank 0 sends -msgs messages of -bytes bytes to rank 1. With -wait-level
// L every rank first prints "ready RANK" and waits until its trace level
// is L (raised by the SIGUSR1s gorun forwards), then writes a mark and
// runs a Barrier, whose begin and end it traces from level 3.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/weft-hpc/weft/internal/trace"
	"github.com/weft-hpc/weft/mpi"
)

func main() {
	msgs := flag.Int("msgs", 10, "messages rank 0 sends rank 1")
	size := flag.Int("bytes", 1000, "bytes in each")
	waitLevel := flag.Int("wait-level", 0, "trace level to wait for before sending (0: none)")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracestats:", err)
		os.Exit(1)
	}
	c := w.Comm()
	if err == nil && *waitLevel > 0 {
		err = awaitLevel(w, c, trace.Level(*waitLevel))
	}
	if err == nil {
		err = exchange(c, *msgs, *size)
	}
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tracestats: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
}

// awaitLevel says the rank is ready, waits (at most 30s) until the trace
// level is l, marks it and runs a Barrier.
func awaitLevel(w *mpi.World, c *mpi.Comm, l trace.Level) error {
	fmt.Printf("ready %d\n", c.Rank())
	for deadline := time.Now().Add(30 * time.Second); trace.Get() != l; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("trace level %v after 30s, want %v", trace.Get(), l)
		}
	}
	w.Mark("level %v reached", l)
	return c.Barrier()
}

// exchange sends n messages of size bytes from rank 0 to rank 1.
func exchange(c *mpi.Comm, n, size int) error {
	buf := make([]byte, size)
	for i := range n {
		var err error
		switch c.Rank() {
		case 0:
			buf[0] = byte(i)
			err = mpi.Send(c, buf, 1, 5)
		case 1:
			_, err = mpi.Recv(c, buf, 0, 5)
			if err == nil && buf[0] != byte(i) {
				err = fmt.Errorf("message %d carries %d", i, buf[0])
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
