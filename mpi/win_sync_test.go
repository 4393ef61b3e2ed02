package mpi

import (
	"fmt"
	"testing"
)

// TestWinOutlivesItsComm: MPI lets a program free the communicator a
// window was made over while the window lives on (MPI_Win_create
// duplicates it); Fence and Free of the window must still work.
func TestWinOutlivesItsComm(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		d, win, base, err := windowOverDup(c)
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		if err := win.Fence(); err != nil {
			return fmt.Errorf("Fence after the communicator's Free: %w", err)
		}
		if err := win.Put([]int64{int64(c.Rank() + 1)}, 1-c.Rank(), 0); err != nil {
			return err
		}
		if err := win.Fence(); err != nil {
			return fmt.Errorf("Fence after the communicator's Free: %w", err)
		}
		if base[0] != int64(2-c.Rank()) {
			return fmt.Errorf("window %v", base)
		}
		if err := win.Free(); err != nil {
			return fmt.Errorf("window Free after the communicator's Free: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWinFenceBesideCommCollectives: a window's Fence is no collective
// call on the communicator it was made over: a rank may start an Ibarrier
// on that communicator before its Fence while another starts it after
// (legal MPI: MPI_Win_create duplicates the communicator).
func TestWinFenceBesideCommCollectives(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		base := make([]int64, 4)
		win, err := NewWin(c, base)
		if err != nil {
			return err
		}
		var q *Request
		if c.Rank() == 0 {
			if q, err = c.Ibarrier(); err != nil {
				return err
			}
		}
		if err := win.Fence(); err != nil {
			return fmt.Errorf("Fence: %w", err)
		}
		if c.Rank() == 1 {
			if q, err = c.Ibarrier(); err != nil {
				return err
			}
		}
		if _, err := q.Wait(); err != nil {
			return fmt.Errorf("Ibarrier: %w", err)
		}
		return win.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWinFreeAfterCommFree: a window used in passive-target epochs only
// is freed after its communicator was: its Free succeeds, and the rank's
// window progress goroutine stops (no window is counted open after it).
func TestWinFreeAfterCommFree(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		d, win, base, err := windowOverDup(c)
		if err != nil {
			return err
		}
		o := 1 - c.Rank()
		if err := win.Lock(o, true); err != nil {
			return err
		}
		if err := win.Put([]int64{int64(c.Rank() + 1)}, o, 0); err != nil {
			return err
		}
		if err := win.Unlock(o); err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		if err := win.Free(); err != nil {
			return fmt.Errorf("window Free after the communicator's Free: %w (windows still open: %d)", err, openWindows(c.World()))
		}
		if open := openWindows(c.World()); open != 0 {
			return fmt.Errorf("%d windows counted open after the last one's Free", open)
		}
		if base[0] != int64(2-c.Rank()) {
			return fmt.Errorf("window %v", base)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// windowOverDup makes a window of 4 int64 over a Dup of c, and returns
// the Dup, the window and its base.
func windowOverDup(c *Comm) (*Comm, *Win[int64], []int64, error) {
	d, err := c.Dup()
	if err != nil {
		return nil, nil, nil, err
	}
	base := make([]int64, 4)
	win, err := NewWin(d, base)
	return d, win, base, err
}

// openWindows is how many windows w counts open.
func openWindows(w *World) int {
	w.win.mu.Lock()
	defer w.win.mu.Unlock()
	return w.win.open
}
