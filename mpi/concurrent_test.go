package mpi

import (
	"fmt"
	"sync"
	"testing"
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
