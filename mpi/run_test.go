package mpi

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weft-hpc/weft/transport/inproc"
)

func TestRunPingPong(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		buf := make([]int64, 4)
		if c.Rank() == 0 {
			for i := range buf {
				buf[i] = int64(i * 10)
			}
			if err := Send(c, buf, 1, 7); err != nil {
				return err
			}
			st, err := Recv(c, buf, 1, 8)
			if err != nil {
				return err
			}
			if st.Source != 1 || st.Tag != 8 || st.Count != 4 || buf[3] != 31 {
				t.Errorf("rank 0 got %+v %v", st, buf)
			}
			return nil
		}
		st, err := Recv(c, buf, 0, 7)
		if err != nil {
			return err
		}
		if st.Count != 4 || buf[3] != 30 {
			t.Errorf("rank 1 got %+v %v", st, buf)
		}
		buf[3]++
		return Send(c, buf, 0, 8)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunAllreduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8} {
		err := Run(n, func(c *Comm) error {
			v := []float64{float64(c.Rank() + 1)}
			if err := Allreduce(c, v, v, Sum); err != nil {
				return err
			}
			if want := float64(n * (n + 1) / 2); v[0] != want {
				t.Errorf("n=%d rank %d: %v want %v", n, c.Rank(), v[0], want)
			}
			return c.Barrier()
		})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
	}
}

func TestRunRankFails(t *testing.T) {
	boom := errors.New("boom")
	err := Run(3, func(c *Comm) error {
		if c.Rank() == 1 {
			return boom
		}
		buf := make([]byte, 1)
		_, err := Recv(c, buf, 1, 0)
		if !errors.Is(err, ErrPeerFailed) {
			t.Errorf("rank %d: recv from dead rank: %v", c.Rank(), err)
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want boom", err)
	}
}

// TestRootedCollectivesLoop runs each rooted collective thousands of times
// in a row from one root, for every root, on messages and through the
// shared block, and checks every result. A rank that needs nothing from
// the others in such a loop (the root of a Bcast or a Scatter, a leaf of
// a Reduce, a non-root of a Gather) runs ahead, its small sends queued in
// lapi once the slower ranks' inboxes are full, and returns from fn
// first: Run must keep its progress going, or the others wait for ever
// for its last messages (a Bcast loop hung in half the runs, a Reduce
// loop in all). A hang fails by Options.Timeout.
func TestRootedCollectivesLoop(t *testing.T) {
	const n = 4
	rounds := 3000
	if raceEnabled {
		rounds = 1500 // still past the 1024 frames of an inbox
	}
	colls := []struct {
		name string
		run  func(c *Comm, i, root int) error
	}{
		{"Bcast", func(c *Comm, i, root int) error {
			v := []int64{-1}
			if c.Rank() == root {
				v[0] = int64(i)
			}
			if err := Bcast(c, v, root); err != nil {
				return err
			}
			return expect("bcast", v, []int64{int64(i)})
		}},
		{"Reduce", func(c *Comm, i, root int) error {
			got := []int64{-1}
			if err := Reduce(c, []int64{int64(i + c.Rank())}, got, Sum, root); err != nil || c.Rank() != root {
				return err
			}
			return expect("reduce", got, []int64{int64(n*i + n*(n-1)/2)})
		}},
		{"Gather", func(c *Comm, i, root int) error {
			got := make([]int64, n)
			if err := Gather(c, []int64{int64(i + c.Rank())}, got, root); err != nil || c.Rank() != root {
				return err
			}
			return expect("gather", got, []int64{int64(i), int64(i + 1), int64(i + 2), int64(i + 3)})
		}},
		{"Scatter", func(c *Comm, i, root int) error {
			send := []int64{int64(i), int64(i + 1), int64(i + 2), int64(i + 3)}
			got := []int64{-1}
			if err := Scatter(c, send, got, root); err != nil {
				return err
			}
			return expect("scatter", got, []int64{int64(i + c.Rank())})
		}},
	}
	for _, shm := range []string{"off", "on"} {
		for _, cl := range colls {
			for root := range n {
				t.Run(fmt.Sprintf("shm=%s/%s/root=%d", shm, cl.name, root), func(t *testing.T) {
					opts := Options{NoShmColl: shm == "off", Timeout: 10 * time.Second}
					err := RunWith(n, opts, func(c *Comm) error {
						for i := range rounds {
							if err := cl.run(c, i, root); err != nil {
								return fmt.Errorf("round %d: %w", i, err)
							}
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// TestRunDeliversQueuedSends: the root of a Bcast on messages does not
// wait, so it runs the whole loop, its sends queued in lapi past the
// others' full inboxes, and returns from fn before any other rank has
// begun: the others then receive every call's data from what Run's
// progress of the finished root hands on (TestRootedCollectivesLoop's
// hang, made certain).
func TestRunDeliversQueuedSends(t *testing.T) {
	const n, calls = 4, 3 * inproc.DefaultQueueLen
	for root := range n {
		gate := make(chan struct{})
		opts := Options{NoShmColl: true, Timeout: 10 * time.Second}
		err := RunWith(n, opts, func(c *Comm) error {
			if c.Rank() == root {
				defer close(gate)
			} else {
				<-gate
			}
			for i := range calls {
				v := []int64{-1}
				if c.Rank() == root {
					v[0] = int64(i)
				}
				if err := Bcast(c, v, root); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
				if err := expect("bcast", v, []int64{int64(i)}); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("root %d: %v", root, err)
		}
	}
}

// expect says how got differs from want, or nil.
func expect(what string, got, want []int64) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}
