package mpi

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/weft-hpc/weft/transport/inproc"
)

// TestSharedCollectives runs every collective the shared block carries
// (Barrier, Allreduce, Reduce, Bcast, Gather, Allgather, Scatter, Alltoall)
// for many rounds, with every root and sizes up to a
// full slot and just past it (messages), on as many ranks as cores and on
// more (where waiters yield and block, and are nudged), and checks every
// result and that the shared path ran.
func TestSharedCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 16} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			err := Run(n, func(c *Comm) error {
				if c.sh == nil {
					return fmt.Errorf("rank %d: no shared-memory collectives on %d ranks", c.Rank(), n)
				}
				rounds := uint32(0)
				for i := range 40 {
					elems := []int{0, 1, 3, shSlot / 8, shSlot/8 + 1}[i%5]
					if elems <= shSlot/8 {
						rounds += 3 // Allreduce, Bcast, Reduce; Barrier below
					}
					send := make([]int64, elems)
					for e := range send {
						send[e] = int64(c.Rank()*1000 + e + i)
					}
					got := make([]int64, elems)
					if err := Allreduce(c, send, got, Sum); err != nil {
						return err
					}
					for e, v := range got {
						if want := int64(1000*n*(n-1)/2 + n*(e+i)); v != want {
							return fmt.Errorf("round %d: allreduce element %d = %d, want %d", i, e, v, want)
						}
					}
					root := i % n
					b := make([]int64, elems)
					if c.Rank() == root {
						copy(b, send)
					}
					if err := Bcast(c, b, root); err != nil {
						return err
					}
					for e, v := range b {
						if want := int64(root*1000 + e + i); v != want {
							return fmt.Errorf("round %d: bcast from %d element %d = %d, want %d", i, root, e, v, want)
						}
					}
					red := make([]int64, elems)
					if err := Reduce(c, send, red, Max, root); err != nil {
						return err
					}
					if c.Rank() == root {
						for e, v := range red {
							if want := int64((n-1)*1000 + e + i); v != want {
								return fmt.Errorf("round %d: reduce to %d element %d = %d, want %d", i, root, e, v, want)
							}
						}
					}
					if err := checkDataMovers(c, i, elems); err != nil {
						return err
					}
					if elems <= shSlot/8 {
						rounds += 2 // Gather, Allgather
					}
					if n*elems <= shSlot/8 {
						rounds += 2 // Scatter, Alltoall: all the blocks in one slot
					}
					if err := c.Barrier(); err != nil {
						return err
					}
					rounds++
				}
				if c.sh.Rounds() != rounds {
					return fmt.Errorf("rank %d: %d shared rounds, want %d", c.Rank(), c.sh.Rounds(), rounds)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkDataMovers runs Gather, Allgather, Scatter and Alltoall in round
// i with blocks of elems elements and checks what every rank gets.
func checkDataMovers(c *Comm, i, elems int) error {
	n, me, root := c.Size(), c.Rank(), (i+1)%c.Size()
	val := func(from, to, e int) int64 { return int64(from*100000 + to*1000 + e + i) }
	mine := make([]int64, elems)
	for e := range mine {
		mine[e] = val(me, 0, e)
	}
	all := make([]int64, n*elems)
	if err := Gather(c, mine, all, root); err != nil {
		return err
	}
	check := func(what string, got []int64, want func(q, e int) int64) error {
		for q := range n {
			for e := range elems {
				if g, w := got[q*elems+e], want(q, e); g != w {
					return fmt.Errorf("round %d: %s: block %d element %d = %d, want %d", i, what, q, e, g, w)
				}
			}
		}
		return nil
	}
	if me == root {
		if err := check("gather", all, func(q, e int) int64 { return val(q, 0, e) }); err != nil {
			return err
		}
	}
	clear(all)
	if err := Allgather(c, mine, all); err != nil {
		return err
	}
	if err := check("allgather", all, func(q, e int) int64 { return val(q, 0, e) }); err != nil {
		return err
	}
	blocks := make([]int64, n*elems) // block q is this rank's for rank q
	for q := range n {
		for e := range elems {
			blocks[q*elems+e] = val(me, q, e)
		}
	}
	got := make([]int64, elems)
	if err := Scatter(c, blocks, got, root); err != nil {
		return err
	}
	for e, g := range got {
		if w := val(root, me, e); g != w {
			return fmt.Errorf("round %d: scatter from %d element %d = %d, want %d", i, root, e, g, w)
		}
	}
	if err := Alltoall(c, blocks, all); err != nil {
		return err
	}
	return check("alltoall", all, func(q, e int) int64 { return val(q, me, e) })
}

// TestSharedAllreduceSameBits: every member reduces the parts in rank
// order, so floating-point sums, whose value depends on the order, come
// out the same bit for bit everywhere, and equal to the rank-order sum.
func TestSharedAllreduceSameBits(t *testing.T) {
	const n = 4
	parts := []float64{1e16, 1, -1e16, 1} // ((1e16+1)-1e16)+1 = 1, not 2
	want := parts[0]
	for _, p := range parts[1:] {
		want += p
	}
	got := make([]uint64, n)
	err := Run(n, func(c *Comm) error {
		v := []float64{parts[c.Rank()]}
		if err := Allreduce(c, v, v, Sum); err != nil {
			return err
		}
		got[c.Rank()] = math.Float64bits(v[0])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, g := range got {
		if g != math.Float64bits(want) {
			t.Errorf("rank %d: %v, want %v (the rank-order sum)", r, math.Float64frombits(g), want)
		}
	}
}

// TestSharedMismatchedLengths: members that disagree on a collective's
// length get ErrArg naming both, not each other's stale bytes.
func TestSharedMismatchedLengths(t *testing.T) {
	errs := make([]error, 3)
	Run(3, func(c *Comm) error {
		b := make([]int32, 2+c.Rank()%2) // ranks 0 and 2 send 2, rank 1 expects 3
		errs[c.Rank()] = Bcast(c, b, 0)
		return nil
	})
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("ranks with the root's length: %v, %v; want success", errs[0], errs[2])
	}
	if err := errs[1]; !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "8 bytes") {
		t.Errorf("rank expecting 12 bytes of a root's 8: %v, want ErrArg saying 8 bytes", err)
	}
}

// TestSharedWaiterNudged: a member that blocked in a shared collective
// (its sleep word set) is woken by the nudge of the member it waits for.
// Without the nudge it would sleep until WEFT_TIMEOUT.
func TestSharedWaiterNudged(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	err := Run(2, func(c *Comm) error {
		if c.Rank() == 1 {
			return c.Barrier()
		}
		for !c.sh.Asleep(1) {
			runtime.Gosched() // until rank 1 is about to block
		}
		before := c.World().lc.Stats().MessagesSent
		if err := c.Barrier(); err != nil {
			return err
		}
		if sent := c.World().lc.Stats().MessagesSent - before; sent != 1 {
			return fmt.Errorf("rank 0 sent %d messages entering the barrier, want 1 nudge", sent)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSharedPeerFailed: a member that fails instead of joining fails the
// others' shared collective with ErrPeerFailed; nobody hangs.
func TestSharedPeerFailed(t *testing.T) {
	errs := make([]error, 3)
	var mu sync.Mutex
	err := Run(3, func(c *Comm) error {
		if c.Rank() == 2 {
			return errors.New("rank 2 gives up")
		}
		v := []int64{1}
		err := Allreduce(c, v, v, Sum)
		mu.Lock()
		errs[c.Rank()] = err
		mu.Unlock()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "rank 2 gives up") {
		t.Errorf("Run: %v, want rank 2's error", err)
	}
	for r, err := range errs[:2] {
		if !errors.Is(err, ErrPeerFailed) {
			t.Errorf("rank %d: %v, want ErrPeerFailed", r, err)
		}
	}
}

// TestSharedTimeout: a member that never comes makes the others' wait end
// at WEFT_TIMEOUT with an error naming the collective and the rank, both
// for a waiter that polls first and for one that blocks at once (more
// ranks than GOMAXPROCS); the communicator's next collective, whose
// member still does not come, times out too (the failed call was aborted,
// and the members' rounds may be out of step: it goes by messages).
func TestSharedTimeout(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "200ms")
	for _, procs := range []int{runtime.GOMAXPROCS(0), 1} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			release := make(chan struct{})
			var err0, again error
			Run(2, func(c *Comm) error {
				if c.Rank() == 1 {
					<-release
					return nil
				}
				err0 = c.Barrier()
				again = c.Barrier()
				close(release)
				return nil
			})
			var te *TimeoutError
			if !errors.As(err0, &te) || !strings.Contains(te.Waiting, "Barrier (shared memory) from rank 1") {
				t.Errorf("rank 0: %v, want a TimeoutError waiting for the shared-memory Barrier from rank 1", err0)
			}
			if !errors.Is(again, ErrTimeout) || !strings.Contains(again.Error(), "from rank 1") {
				t.Errorf("the next barrier: %v, want a timeout waiting for rank 1", again)
			}
		})
	}
}

// TestSharedPeerFailedElsewhere: a wait fails as soon as any member it
// still needs has failed, not only the first it has not seen: here rank 1
// is alive but late, and rank 2 has failed.
func TestSharedPeerFailedElsewhere(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s") // a hang fails as a timeout, which the test refuses
	release := make(chan struct{})
	var err0 error
	Run(3, func(c *Comm) error {
		switch c.Rank() {
		case 1:
			<-release
			return nil
		case 2:
			return errors.New("rank 2 gives up")
		}
		err0 = c.Barrier()
		close(release)
		return nil
	})
	if !errors.Is(err0, ErrPeerFailed) || !strings.Contains(err0.Error(), "rank 2") {
		t.Errorf("rank 0: %v, want ErrPeerFailed naming rank 2", err0)
	}
}

// TestSharedAfterFinalize: a shared collective after Finalize is
// ErrFinalized (over shm the block is unmapped by then).
func TestSharedAfterFinalize(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		if err := c.World().Finalize(); err != nil {
			return err
		}
		v := []int64{1}
		for _, f := range []func() error{c.Barrier, func() error { return Allreduce(c, v, v, Sum) }, func() error { return Bcast(c, v, 0) }} {
			if err := f(); !errors.Is(err, ErrFinalized) {
				return fmt.Errorf("a collective after Finalize: %v, want ErrFinalized", err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSharedCommunicators: duplicated and split communicators get areas
// of their own (the halves of a split share one, on disjoint lines) and
// run concurrently; communicators past the last area use messages.
func TestSharedCommunicators(t *testing.T) {
	const n = 4
	err := Run(n, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		half, err := c.Split(c.Rank()%2, 0)
		if err != nil {
			return err
		}
		if got, want := c.w.sh.Areas(), 15; got != want { // what README and doc.go say for 64 KiB per rank
			return fmt.Errorf("%d areas in a block of %d KiB per rank, want %d", got, inproc.SharedBytes>>10, want)
		}
		if d.sh == nil || half.sh == nil {
			return fmt.Errorf("rank %d: dup shared %v, split shared %v; want both", c.Rank(), d.sh != nil, half.sh != nil)
		}
		for i := range 20 {
			for _, cc := range []*Comm{half, d, c} {
				v := []int64{int64(cc.Rank() + i)}
				if err := Allreduce(cc, v, v, Sum); err != nil {
					return err
				}
				m := int64(cc.Size())
				if want := m*(m-1)/2 + m*int64(i); v[0] != want {
					return fmt.Errorf("rank %d round %d, communicator of %d: %d, want %d", c.Rank(), i, cc.Size(), v[0], want)
				}
			}
		}
		var last *Comm
		for last = d; last.sh != nil; {
			if last, err = last.Dup(); err != nil {
				return err
			}
		}
		if area := int(last.ctx / 2); area < c.w.sh.Areas() {
			return fmt.Errorf("communicator with context %d (area %d of %d) has no shared state", last.ctx, area, c.w.sh.Areas())
		}
		v := []int64{1}
		if err := Allreduce(last, v, v, Sum); err != nil || v[0] != n {
			return fmt.Errorf("allreduce on a communicator past the areas: %d, %v; want %d", v[0], err, n)
		}
		return last.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSharedOff: WEFT_SHMCOLL=off keeps collectives on messages, and a bad
// value is refused by name.
func TestSharedOff(t *testing.T) {
	t.Setenv("WEFT_SHMCOLL", "off")
	err := Run(2, func(c *Comm) error {
		if c.sh != nil {
			return errors.New("shared-memory collectives with WEFT_SHMCOLL=off")
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEFT_SHMCOLL", "maybe")
	if err := Run(2, func(c *Comm) error { return nil }); err == nil || !strings.Contains(err.Error(), `WEFT_SHMCOLL="maybe"`) {
		t.Errorf("WEFT_SHMCOLL=maybe: %v, want an error naming it", err)
	}
}

// TestSharedAllreduceAllocs: the shared path allocates nothing.
func TestSharedAllreduceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	err := Run(2, func(c *Comm) error {
		v := []float64{1}
		step := func() {
			if err := Allreduce(c, v, v, Sum); err != nil {
				panic(err)
			}
		}
		step()
		if c.Rank() == 1 {
			for range 201 {
				step() // rank 0's AllocsPerRun makes 201 calls
			}
			return nil
		}
		if a := testing.AllocsPerRun(200, step); a != 0 {
			return fmt.Errorf("shared Allreduce: %v allocations per call", a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSharedBcastFlowControl: a root broadcasting round after round does
// not overwrite a slot before every member has started the round after
// the slot's last use: with rank 1 still in round 1, rank 0 may stamp
// round 2 (the other slot) but not round 3 (round 1's slot).
func TestSharedBcastFlowControl(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		v := []int64{0}
		if c.Rank() == 0 {
			for i := int64(1); i <= 3; i++ {
				v[0] = i
				if err := Bcast(c, v, 0); err != nil {
					return err
				}
			}
			return nil
		}
		if err := Bcast(c, v, 0); err != nil || v[0] != 1 {
			return fmt.Errorf("first bcast: %d, %v", v[0], err)
		}
		for c.sh.Stamp(0, 0) != 2 {
			runtime.Gosched() // until the root has stamped round 2
		}
		for range 1000 {
			runtime.Gosched() // room for a root that did not wait to run on
		}
		if s := c.sh.Stamp(0, 1); s != 1 {
			return fmt.Errorf("the root stamped round %d in round 1's slot before rank 1 started round 2", s)
		}
		for want := int64(2); want <= 3; want++ {
			if err := Bcast(c, v, 0); err != nil || v[0] != want {
				return fmt.Errorf("bcast %d: %d, %v", want, v[0], err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
