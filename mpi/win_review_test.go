package mpi

import (
	"fmt"
	"testing"
)

// TestReviewWinCommFreed: MPI lets a program free the communicator a
// window was made over while the window lives on (MPI_Win_create
// duplicates it); Fence and Free of the window must still work.
func TestReviewWinCommFreed(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		base := make([]int64, 4)
		win, err := NewWin(d, base)
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

// TestReviewWinFenceIcollOrder: a window's Fence is collective over the
// window, not a collective on its communicator: a rank may start an
// Ibarrier on the communicator before its Fence while another starts it
// after (legal MPI: MPI_Win_create duplicates the communicator).
func TestReviewWinFenceIcollOrder(t *testing.T) {
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

// TestReviewWinFreeAfterCommFree: a program that uses the window in
// passive-target epochs only and frees the communicator first cannot
// free the window at all: its registrations, counters and the rank's
// window progress goroutine stay until Finalize.
func TestReviewWinFreeAfterCommFree(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(2, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		base := make([]int64, 4)
		win, err := NewWin(d, base)
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
			w := c.World()
			w.win.mu.Lock()
			open := w.win.open
			w.win.mu.Unlock()
			return fmt.Errorf("window Free after the communicator's Free: %w (windows still open: %d)", err, open)
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
