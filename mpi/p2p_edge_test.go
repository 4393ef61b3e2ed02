package mpi

import (
	"errors"
	"fmt"
	"testing"
)

// TestP2PTruncate: messages of every protocol into shorter buffers (down
// to none) fail with ErrTruncate, fill what fits, and the sender completes.
func TestP2PTruncate(t *testing.T) {
	p2pFaults(t, "loss=0.05,reorder=0.2,dup=0.05,seed=5")
	sizes := []int{100, 20 << 10, 200 << 10, 300 << 10}
	keeps := []int{0, 1, 50, 8 << 10, 150 << 10}
	err := Run(2, func(c *Comm) error {
		i := 0
		for _, n := range sizes {
			for _, k := range keeps {
				if k >= n {
					continue
				}
				i++
				if c.Rank() == 0 {
					if err := Send(c, p2pFill(i, n), 1, 2); err != nil {
						return fmt.Errorf("send %d bytes: %w", n, err)
					}
					continue
				}
				buf := make([]byte, k)
				st, err := Recv(c, buf, 0, 2)
				if !errors.Is(err, ErrTruncate) {
					return fmt.Errorf("%d bytes into %d: err %v, want ErrTruncate", n, k, err)
				}
				if st.Count != k {
					return fmt.Errorf("%d bytes into %d: count %d", n, k, st.Count)
				}
				if err := p2pCheck(buf, i, k); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestP2PCancelRace: the receiver posts receives and cancels each at once
// while messages fly; every message must be received exactly once, by a
// receive not cancelled, in order.
func TestP2PCancelRace(t *testing.T) {
	p2pFaults(t, "loss=0.05,reorder=0.2,dup=0.05,seed=9")
	sizes := []int{0, 64, 20 << 10, 200 << 10}
	const n = 200
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 0 {
			for i := range n {
				if err := Send(c, p2pFill(i, sizes[i%len(sizes)]), 1, 1); err != nil {
					return err
				}
			}
			return nil
		}
		got := 0
		for got < n {
			buf := make([]byte, 200<<10)
			tag := 1
			if got%2 == 0 {
				tag = AnyTag
			}
			q, err := Irecv(c, buf, AnySource, tag)
			if err != nil {
				return err
			}
			if err := q.Cancel(); err != nil {
				return err
			}
			st, err := q.Wait()
			if err != nil {
				return err
			}
			if st.Cancelled {
				// Wait on a cancelled receive makes no progress: let
				// messages in before the next try.
				if _, _, err := c.Iprobe(0, 1); err != nil {
					return err
				}
				continue
			}
			want := sizes[got%len(sizes)]
			if st.Count != want {
				return fmt.Errorf("message %d: %d bytes, want %d", got, st.Count, want)
			}
			if err := p2pCheck(buf, got, want); err != nil {
				return err
			}
			got++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestP2PAnySourceMixed: two senders, mixed sizes, the receiver with
// AnySource and AnyTag receives racing specific ones; per sender, order
// holds and data is exact.
func TestP2PAnySourceMixed(t *testing.T) {
	p2pFaults(t, "loss=0.05,reorder=0.2,dup=0.05,seed=13")
	const n = 60
	err := Run(3, func(c *Comm) error {
		if c.Rank() != 0 {
			var reqs []*Request
			for i := range n {
				q, err := Isend(c, p2pFill(i+1000*c.Rank(), p2pSizes[i%len(p2pSizes)]), 0, c.Rank())
				if err != nil {
					return err
				}
				reqs = append(reqs, q)
			}
			return WaitAll(reqs...)
		}
		next := []int{0, 0, 0}
		left := []int{0, n, n}
		check := func(st Status, buf []byte) error {
			i := next[st.Source]
			next[st.Source]++
			left[st.Source]--
			if st.Count != p2pSizes[i%len(p2pSizes)] {
				return fmt.Errorf("from %d message %d: %d bytes, want %d", st.Source, i, st.Count, p2pSizes[i%len(p2pSizes)])
			}
			return p2pCheck(buf, i+1000*st.Source, st.Count)
		}
		for k := 0; left[1]+left[2] > 0; k++ {
			b1, b2 := make([]byte, 300<<10), make([]byte, 300<<10)
			tag1 := AnyTag
			if k%3 == 1 {
				tag1 = 1 + k%2
				if left[tag1] == 0 {
					tag1 = AnyTag
				}
			}
			q1, err := Irecv(c, b1, AnySource, tag1)
			if err != nil {
				return err
			}
			var q2 *Request
			s := 1 + k%2
			if left[1]+left[2] >= 2 {
				if left[s] < 2 {
					s = AnySource
				}
				if q2, err = Irecv(c, b2, s, AnyTag); err != nil {
					return err
				}
			}
			st, err := q1.Wait()
			if err != nil {
				return err
			}
			if err := check(st, b1); err != nil {
				return err
			}
			if q2 != nil {
				st, err := q2.Wait()
				if err != nil {
					return err
				}
				if err := check(st, b2); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
