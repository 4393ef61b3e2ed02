package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestP2PNoLeaks: after rendezvous, split, truncated, self, Mprobe'd and
// cancelled traffic, no registration and no request is left behind.
func TestP2PNoLeaks(t *testing.T) {
	p2pFaults(t, "loss=0.05,reorder=0.2,dup=0.05,seed=21")
	err := Run(2, func(c *Comm) error {
		w := c.w
		if err := c.Barrier(); err != nil {
			return err
		}
		base := len(w.lc.TPT().Entries())
		sizes := []int{20 << 10, 200 << 10, 300 << 10, 1 << 20}
		for i, n := range sizes {
			peer := 1 - c.Rank()
			// exchange, truncated to 0 and to half
			for _, k := range []int{0, n / 2, n} {
				s, err := Isend(c, p2pFill(i, n), peer, 1)
				if err != nil {
					return err
				}
				buf := make([]byte, k)
				if _, err := Recv(c, buf, peer, 1); err != nil && !(k < n && errors.Is(err, ErrTruncate)) {
					return fmt.Errorf("%d into %d: %w", n, k, err)
				}
				if _, err := s.Wait(); err != nil {
					return err
				}
			}
			// self
			s, err := Isend(c, p2pFill(i, n), c.Rank(), 2)
			if err != nil {
				return err
			}
			buf := make([]byte, n)
			if _, err := Recv(c, buf, c.Rank(), 2); err != nil {
				return err
			}
			if _, err := s.Wait(); err != nil {
				return err
			}
			// mprobe
			s, err = Isend(c, p2pFill(i, n), peer, 3)
			if err != nil {
				return err
			}
			m, _, err := c.Mprobe(peer, 3)
			if err != nil {
				return err
			}
			if _, err := Mrecv(m, buf); err != nil {
				return err
			}
			if _, err := s.Wait(); err != nil {
				return err
			}
			// cancelled receive
			q, err := Irecv(c, buf, peer, 99)
			if err != nil {
				return err
			}
			q.Cancel()
			if st, err := q.Wait(); err != nil || !st.Cancelled {
				return fmt.Errorf("cancel: %+v %v", st, err)
			}
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		w.mu.Lock()
		live := w.reqs.live()
		w.mu.Unlock()
		left := len(w.lc.TPT().Entries()) - base
		if live != 0 || left != 0 || w.m.posted.head != nil || w.m.unexpected.head != nil || len(w.m.held) != 0 {
			return fmt.Errorf("rank %d: %d requests, %d registrations, posted %v, unexpected %v, held %d left",
				c.Rank(), live, left, w.m.posted.head != nil, w.m.unexpected.head != nil, len(w.m.held))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
