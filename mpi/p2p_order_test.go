package mpi

import (
	"fmt"
	"testing"
)

// p2pFill fills a message of n bytes for index i so that a receiver can
// tell which message it got.
func p2pFill(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*131 + j*7 + 1)
	}
	return b
}

func p2pCheck(got []byte, i, n int) error {
	if len(got) < n {
		return fmt.Errorf("message %d: buffer %d < %d", i, len(got), n)
	}
	want := p2pFill(i, n)
	for j := range n {
		if got[j] != want[j] {
			return fmt.Errorf("message %d (%d bytes): byte %d is %d, want %d", i, n, j, got[j], want[j])
		}
	}
	return nil
}

var p2pSizes = []int{0, 100, 20 << 10, 4 << 10, 200 << 10, 1, 70 << 10, 0, 300 << 10, 16<<10 - 1, 16 << 10, 8}

// TestP2PMixedOrderFaults: one sender, one tag, eager and rendezvous (and
// split) sizes interleaved, under loss, reorder and dup; the receiver
// pre-posts some receives (half wildcard tag, half specific) and takes the
// rest late. Every message must match in send order with exact data.
func TestP2PMixedOrderFaults(t *testing.T) {
	p2pFaults(t, "loss=0.05,reorder=0.2,dup=0.05,seed=11")
	const rounds = 6
	err := Run(2, func(c *Comm) error {
		n := len(p2pSizes) * rounds
		if c.Rank() == 0 {
			var reqs []*Request
			for i := range n {
				r, err := Isend(c, p2pFill(i, p2pSizes[i%len(p2pSizes)]), 1, 7)
				if err != nil {
					return err
				}
				reqs = append(reqs, r)
			}
			return WaitAll(reqs...)
		}
		bufs := make([][]byte, n)
		reqs := make([]*Request, n)
		for i := range n / 2 {
			bufs[i] = make([]byte, 300<<10)
			tag := 7
			if i%2 == 0 {
				tag = AnyTag
			}
			var err error
			if reqs[i], err = Irecv(c, bufs[i], AnySource, tag); err != nil {
				return err
			}
		}
		for i := n / 2; i < n; i++ {
			bufs[i] = make([]byte, 300<<10)
			tag := 7
			if i%3 == 0 {
				tag = AnyTag
			}
			st, err := Recv(c, bufs[i], 0, tag)
			if err != nil {
				return err
			}
			if st.Count != p2pSizes[i%len(p2pSizes)] {
				return fmt.Errorf("late message %d: count %d, want %d", i, st.Count, p2pSizes[i%len(p2pSizes)])
			}
			if err := p2pCheck(bufs[i], i, st.Count); err != nil {
				return err
			}
		}
		for i := range n / 2 {
			st, err := reqs[i].Wait()
			if err != nil {
				return err
			}
			if st.Count != p2pSizes[i%len(p2pSizes)] {
				return fmt.Errorf("early message %d: count %d, want %d", i, st.Count, p2pSizes[i%len(p2pSizes)])
			}
			if err := p2pCheck(bufs[i], i, st.Count); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestP2PMprobeRendezvous: Mprobe then Mrecv of rendezvous and split
// messages, interleaved with eager ones, in order.
func TestP2PMprobeRendezvous(t *testing.T) {
	p2pFaults(t, "loss=0.05,reorder=0.2,dup=0.05,seed=3")
	err := Run(2, func(c *Comm) error {
		n := len(p2pSizes) * 3
		if c.Rank() == 0 {
			var reqs []*Request
			for i := range n {
				r, err := Isend(c, p2pFill(i, p2pSizes[i%len(p2pSizes)]), 1, i%2)
				if err != nil {
					return err
				}
				reqs = append(reqs, r)
			}
			return WaitAll(reqs...)
		}
		for i := range n {
			tag := AnyTag
			if i%3 == 1 {
				tag = i % 2
			}
			var (
				m   *Message
				st  Status
				err error
			)
			if i%4 == 3 {
				for {
					var found bool
					found, m, st, err = c.Improbe(0, tag)
					if err != nil || found {
						break
					}
				}
			} else {
				m, st, err = c.Mprobe(AnySource, tag)
			}
			if err != nil {
				return err
			}
			want := p2pSizes[i%len(p2pSizes)]
			if st.Count != want || st.Tag != i%2 {
				return fmt.Errorf("message %d: probe says %d bytes tag %d, want %d tag %d", i, st.Count, st.Tag, want, i%2)
			}
			buf := make([]byte, want)
			var rst Status
			if i%2 == 0 {
				rst, err = Mrecv(m, buf)
			} else {
				var q *Request
				if q, err = Imrecv(m, buf); err == nil {
					rst, err = q.Wait()
				}
			}
			if err != nil {
				return err
			}
			if rst.Count != want {
				return fmt.Errorf("message %d: count %d, want %d", i, rst.Count, want)
			}
			if err := p2pCheck(buf, i, want); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestP2PSelf: messages to self of every size, nonblocking send first,
// including rendezvous and split sizes, and Sendrecv with self.
func TestP2PSelf(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		me := c.Rank()
		for i, n := range p2pSizes {
			s, err := Isend(c, p2pFill(i, n), me, 3)
			if err != nil {
				return err
			}
			buf := make([]byte, n)
			st, err := Recv(c, buf, me, 3)
			if err != nil {
				return err
			}
			if _, err := s.Wait(); err != nil {
				return err
			}
			if st.Count != n || st.Source != me {
				return fmt.Errorf("self message %d: %+v", i, st)
			}
			if err := p2pCheck(buf, i, n); err != nil {
				return err
			}
			buf2 := make([]byte, n)
			if _, err := Sendrecv(c, p2pFill(i+1, n), me, 4, buf2, me, 4); err != nil {
				return fmt.Errorf("sendrecv self %d bytes: %w", n, err)
			}
			if err := p2pCheck(buf2, i+1, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestP2PManyIsends: thousands of outstanding Isends to one peer, eager
// and rendezvous, then the receiver takes them all; nothing must be left
// in the request table afterwards.
func TestP2PManyIsends(t *testing.T) { p2pManyIsends(t) }

// TestP2PManyIsendsFaults is TestP2PManyIsends under loss, reorder and dup.
func TestP2PManyIsendsFaults(t *testing.T) {
	p2pFaults(t, "loss=0.02,reorder=0.1,dup=0.02,seed=17")
	p2pManyIsends(t)
}

func p2pManyIsends(t *testing.T) {
	sizes := []int{8, 20 << 10, 1 << 10, 40 << 10}
	const n = 3000
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 0 {
			reqs := make([]*Request, n)
			bufs := make([][]byte, len(sizes))
			for k, s := range sizes {
				bufs[k] = p2pFill(k, s)
			}
			for i := range n {
				var err error
				if reqs[i], err = Isend(c, bufs[i%len(sizes)], 1, 1); err != nil {
					return err
				}
			}
			if err := WaitAll(reqs...); err != nil {
				return err
			}
		} else {
			buf := make([]byte, 40<<10)
			for i := range n {
				st, err := Recv(c, buf, 0, AnyTag)
				if err != nil {
					return err
				}
				k := i % len(sizes)
				if st.Count != sizes[k] {
					return fmt.Errorf("message %d: %d bytes, want %d", i, st.Count, sizes[k])
				}
				if err := p2pCheck(buf, k, sizes[k]); err != nil {
					return fmt.Errorf("message %d: %w", i, err)
				}
			}
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		w := c.w
		w.mu.Lock()
		live := w.reqs.live()
		w.mu.Unlock()
		if live != 0 {
			return fmt.Errorf("rank %d: %d requests left in the table", c.Rank(), live)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// p2pFaults sets WEFT_FAULTS for the test ("none": no faults).
func p2pFaults(t *testing.T, spec string) {
	if spec == "none" {
		spec = ""
	}
	t.Setenv("WEFT_FAULTS", spec)
}
