package mpi

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestConcurrentSendRecv has several goroutines of rank 0 send to rank 1
// at once, each on its own tag, while as many goroutines of rank 1
// receive them: every receiver must get its sender's messages whole and
// in the order they were sent (MPI's non-overtaking rule, per sending
// thread). The sizes cover each way a message goes: tiny and short eager
// (copied), eager sent from the caller's buffer, and rendezvous. Half the
// receivers start only once their sender has sent its first two messages
// (eager: a blocking rendezvous send waits for its receive), which then
// arrive unexpected; the others post while messages arrive. Sequence
// numbers are taken under lapi's lock and the matcher lives under it, while
// an unexpected message's completion runs outside it: under the race
// detector this checks that locking.
func TestConcurrentSendRecv(t *testing.T) {
	const goroutines, messages = 4, 24
	sizes := []int{8, 200, 40 << 10, 300 << 10} // bytes: tiny, short, eager uncopied, rendezvous
	run := func(t *testing.T, comm func(r int) *Comm) {
		var wg sync.WaitGroup
		started := make([]chan struct{}, goroutines) // closed once sender g sent two messages
		errs := make(chan error, 2*goroutines)
		for g := range goroutines {
			started[g] = make(chan struct{})
			wg.Add(2)
			go func() { // sender g, rank 0
				defer wg.Done()
				start := sync.OnceFunc(func() { close(started[g]) })
				defer start() // even if a send failed
				c := comm(0)
				for i := range messages {
					if i == 2 {
						start()
					}
					if err := Send(c, message(g, i, sizes[i%len(sizes)]), 1, g); err != nil {
						errs <- fmt.Errorf("sender %d, message %d: %w", g, i, err)
						return
					}
				}
			}()
			go func() { // receiver g, rank 1
				defer wg.Done()
				if g%2 == 1 {
					<-started[g]
				}
				c := comm(1)
				for i := range messages {
					n := sizes[i%len(sizes)]
					buf := make([]int64, n/8)
					st, err := Recv(c, buf, 0, g)
					if err != nil {
						errs <- fmt.Errorf("receiver %d, message %d: %w", g, i, err)
						return
					}
					if st.Source != 0 || st.Tag != g || st.Count != n/8 {
						errs <- fmt.Errorf("receiver %d, message %d: status %+v, want source 0, tag %d, count %d", g, i, st, g, n/8)
						return
					}
					want := message(g, i, n)
					for k := range buf {
						if buf[k] != want[k] {
							errs <- fmt.Errorf("receiver %d, message %d: element %d = %#x, want %#x (out of order or mixed)", g, i, k, buf[k], want[k])
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	t.Run("inproc", func(t *testing.T) {
		var ready sync.WaitGroup
		ready.Add(2)
		comms := make([]*Comm, 2)
		release := make(chan struct{})
		finished := make(chan error)
		go func() {
			finished <- Run(2, func(c *Comm) error {
				comms[c.Rank()] = c
				ready.Done()
				<-release // the test's goroutines use the ranks meanwhile
				return c.Barrier()
			})
		}()
		ready.Wait()
		run(t, func(r int) *Comm { return comms[r] })
		close(release)
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("shm", func(t *testing.T) {
		worlds := shmWorlds(t, 2)
		run(t, func(r int) *Comm { return worlds[r].comm })
	})
}

// message is sender g's i-th message of n bytes: every element names both.
func message(g, i, n int) []int64 {
	b := make([]int64, n/8)
	for k := range b {
		b[k] = int64(g)<<48 | int64(i)<<32 | int64(k)
	}
	return b
}

// TestGoroutinesPerRank has several goroutines in every rank (MPI's
// THREAD_MULTIPLE), each on its own Dup of the world communicator, doing
// collectives and point-to-point exchanges with their peers in the other
// ranks at once, and sending to their own rank: each goroutine's message
// to itself is received by the next goroutine of the rank, which is by
// then usually blocked waiting for it. Under faults the goroutines also
// share the reliability protocol's timers: a loss must be repaired
// whichever goroutine happens to be waiting. Clean and under faults, with
// one rank (nothing but messages to itself) and with several.
func TestGoroutinesPerRank(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults string
		ranks  int
	}{
		{"clean/1", "", 1},
		{"clean/2", "", 2},
		{"clean/3", "", 3},
		{"faults/seed1", "loss=0.05,reorder=0.1,dup=0.02,seed=1", 2},
		{"faults/seed2", "loss=0.05,reorder=0.1,dup=0.02,seed=2", 3},
		{"faults/seed3", "loss=0.05,reorder=0.1,dup=0.02,seed=3", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", tc.faults)
			t.Setenv("WEFT_TIMEOUT", "60s") // a hang fails naming what each goroutine waits for
			if err := Run(tc.ranks, goroutinesPerRank); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// goroutinesPerRank is one rank of TestGoroutinesPerRank.
func goroutinesPerRank(c *Comm) error {
	const goroutines, rounds = 4, 12
	sizes := []int{1, 40, 6 << 10, 80 << 10} // int64s: tiny, short, eager, rendezvous
	comms := make([]*Comm, goroutines)
	for g := range comms {
		d, err := c.Dup() // collective: every rank dups in the same order
		if err != nil {
			return err
		}
		comms[g] = d
	}
	me, n := c.Rank(), c.Size()
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			errs <- func() error {
				cg := comms[g]
				for i := range rounds {
					// To itself: goroutine g's message goes to goroutine
					// g+1 of this rank, on the world communicator.
					size := sizes[(i+g)%len(sizes)]
					out := message(g, i, 8*size)
					sr, err := Isend(c, out, me, (g+1)%goroutines*rounds+i)
					if err != nil {
						return fmt.Errorf("goroutine %d, round %d: send to self: %w", g, i, err)
					}
					from := (g + goroutines - 1) % goroutines
					in := make([]int64, sizes[(i+from)%len(sizes)])
					if _, err := Recv(c, in, me, g*rounds+i); err != nil {
						return fmt.Errorf("goroutine %d, round %d: receive from self: %w", g, i, err)
					}
					if err := checkMessage(in, from, i); err != nil {
						return fmt.Errorf("goroutine %d, round %d: from goroutine %d of this rank: %w", g, i, from, err)
					}
					if _, err := sr.Wait(); err != nil {
						return fmt.Errorf("goroutine %d, round %d: send to self: %w", g, i, err)
					}

					// Around the ring of ranks, on its own communicator.
					ring := make([]int64, size)
					if _, err := Sendrecv(cg, out, (me+1)%n, i, ring, (me+n-1)%n, i); err != nil {
						return fmt.Errorf("goroutine %d, round %d: sendrecv: %w", g, i, err)
					}
					if err := checkMessage(ring, g, i); err != nil {
						return fmt.Errorf("goroutine %d, round %d: from rank %d: %w", g, i, (me+n-1)%n, err)
					}

					// Collectives, on its own communicator.
					sum := make([]float64, size)
					for k := range sum {
						sum[k] = float64(me + g + i + k)
					}
					if err := Allreduce(cg, sum, sum, Sum); err != nil {
						return fmt.Errorf("goroutine %d, round %d: allreduce: %w", g, i, err)
					}
					for k, v := range sum {
						if want := float64(n*(g+i+k) + n*(n-1)/2); v != want {
							return fmt.Errorf("goroutine %d, round %d: allreduce element %d = %v, want %v", g, i, k, v, want)
						}
					}
					b := []int64{int64(g*1000 + i)}
					if me != i%n {
						b[0] = -1
					}
					if err := Bcast(cg, b, i%n); err != nil {
						return fmt.Errorf("goroutine %d, round %d: bcast: %w", g, i, err)
					}
					if b[0] != int64(g*1000+i) {
						return fmt.Errorf("goroutine %d, round %d: bcast gave %d, want %d", g, i, b[0], g*1000+i)
					}
					if err := cg.Barrier(); err != nil {
						return fmt.Errorf("goroutine %d, round %d: barrier: %w", g, i, err)
					}
				}
				return nil
			}()
		}()
	}
	var first error
	for range goroutines {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("rank %d: %w", me, err)
		}
	}
	return first
}

// checkMessage checks that m is goroutine g's message of round i.
func checkMessage(m []int64, g, i int) error {
	want := message(g, i, 8*len(m))
	for k := range m {
		if m[k] != want[k] {
			return fmt.Errorf("element %d = %#x, want %#x", k, m[k], want[k])
		}
	}
	return nil
}

// TestSendToSelfWakesReceiver: a goroutine of a rank blocked in Recv on a
// message from its own rank is woken by another goroutine's Send to it,
// though no frame comes: with one rank, and with two while the other rank
// sends nothing meanwhile. Each size class: taken whole, eager, rendezvous.
func TestSendToSelfWakesReceiver(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			err := Run(n, func(c *Comm) error {
				if c.Rank() != 0 {
					_, err := Recv(c, []int64{0}, 0, 99) // sends nothing until rank 0 is done
					return err
				}
				for i, size := range []int{1, 6 << 10, 80 << 10} { // int64s
					got := make(chan error, 1)
					go func() {
						in := make([]int64, size)
						if _, err := Recv(c, in, 0, i); err != nil {
							got <- err
							return
						}
						got <- checkMessage(in, 0, i)
					}()
					for c.w.Waiting() == "" {
						runtime.Gosched() // until the receiver has stopped spinning and blocks
					}
					if err := Send(c, message(0, i, 8*size), 0, i); err != nil {
						return err
					}
					select {
					case err := <-got:
						if err != nil {
							return fmt.Errorf("%d int64s: %w", size, err)
						}
					case <-time.After(10 * time.Second):
						return fmt.Errorf("%d int64s: the receiver was not woken", size)
					}
				}
				if n > 1 {
					return Send(c, []int64{0}, 1, 99)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
