// Command pingcheck sends -size bytes from rank 0 to rank 1 and a different
// -size bytes back, round after round, and checks every byte of each
// message, for -n rounds or, with -for, until that long has passed. It
// prints "pingcheck ok: N round trips of S bytes" when every message was
// exact, and with -v each round's end (Unix nanoseconds) and duration, so
// that a test can see what a fault mid-transfer cost.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/weft-hpc/weft/mpi"
)

func main() {
	size := flag.Int("size", 16<<20, "bytes per message (a multiple of 8)")
	n := flag.Int("n", 10, "round trips (without -for)")
	dur := flag.Duration("for", 0, "run round trips until this long has passed (rank 0 decides)")
	verbose := flag.Bool("v", false, "print each round's end time and duration")
	flag.Parse()
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pingcheck:", err)
		os.Exit(1)
	}
	c := w.Comm()
	rounds, err := run(c, *size/8, *n, *dur, *verbose)
	if ferr := w.Finalize(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pingcheck: rank %d: %v\n", c.Rank(), err)
		os.Exit(1)
	}
	if c.Rank() == 0 {
		fmt.Printf("pingcheck ok: %d round trips of %d bytes\n", rounds, *size/8*8)
	}
}

// word is the k-th word of the message of round r in direction dir: every
// message differs from the last, so one that arrived late or twice shows.
func word(r, k, dir int) uint64 {
	return (uint64(r)<<33 ^ uint64(k)*0x9e3779b97f4a7c15) + uint64(dir)
}

func fill(buf []uint64, r, dir int) {
	for k := range buf {
		buf[k] = word(r, k, dir)
	}
}

func check(buf []uint64, r, dir int) error {
	for k, v := range buf {
		if want := word(r, k, dir); v != want {
			return fmt.Errorf("round %d direction %d: word %d of %d is %#x, want %#x", r, dir, k, len(buf), v, want)
		}
	}
	return nil
}

// run does the round trips between ranks 0 and 1 (others wait in the
// final barrier). Before each round rank 0 says whether there is one.
func run(c *mpi.Comm, words, n int, dur time.Duration, verbose bool) (int, error) {
	me := c.Rank()
	buf := make([]uint64, words)
	more := make([]int64, 1)
	start := time.Now()
	r := 0
	for ; me < 2; r++ {
		if me == 0 {
			more[0] = 0
			if dur > 0 && time.Since(start) < dur || dur == 0 && r < n {
				more[0] = 1
			}
			if err := mpi.Send(c, more, 1, 1); err != nil {
				return r, err
			}
		} else if _, err := mpi.Recv(c, more, 0, 1); err != nil {
			return r, err
		}
		if more[0] == 0 {
			break
		}
		t0 := time.Now()
		if me == 0 {
			fill(buf, r, 0)
			if err := mpi.Send(c, buf, 1, 2); err != nil {
				return r, err
			}
			if _, err := mpi.Recv(c, buf, 1, 3); err != nil {
				return r, err
			}
			if err := check(buf, r, 1); err != nil {
				return r, err
			}
			if verbose {
				now := time.Now()
				fmt.Printf("round %d end %d took %v\n", r, now.UnixNano(), now.Sub(t0))
			}
		} else {
			if _, err := mpi.Recv(c, buf, 0, 2); err != nil {
				return r, err
			}
			if err := check(buf, r, 0); err != nil {
				return r, err
			}
			fill(buf, r, 1)
			if err := mpi.Send(c, buf, 0, 3); err != nil {
				return r, err
			}
		}
	}
	return r, c.Barrier()
}
