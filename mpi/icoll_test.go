package mpi

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// icollCase starts every nonblocking collective on c at once, count
// elements per rank (roots and ops varied), with a blocking Allreduce and
// a point-to-point exchange in between, completes them in an order that
// differs from rank to rank, and checks each result against what the
// ranks' data says.
func icollCase(c *Comm, count int) error {
	p, me := c.Size(), c.Rank()
	var reqs []*Request
	var names []string
	add := func(name string) func(*Request, error) error {
		return func(q *Request, err error) error {
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			reqs, names = append(reqs, q), append(names, name)
			return nil
		}
	}
	if err := add("Ibarrier")(c.Ibarrier()); err != nil {
		return err
	}
	// Ibcast from the last rank.
	bc := make([]int32, count)
	if me == p-1 {
		for i := range bc {
			bc[i] = int32(i*3 + 7)
		}
	}
	if err := add("Ibcast")(Ibcast(c, bc, p-1)); err != nil {
		return err
	}
	// Ireduce and Iallreduce with a non-commutative op: rank order.
	aff := make([]uint64, count)
	for i := range aff {
		aff[i] = affineVal(me, i)
	}
	red := make([]uint64, count)
	rroot := p / 2
	if err := add("Ireduce")(Ireduce(c, aff, red, affineOp, rroot)); err != nil {
		return err
	}
	ared := make([]uint64, count)
	if err := add("Iallreduce")(Iallreduce(c, aff, ared, affineOp)); err != nil {
		return err
	}
	// A large commutative one, which may take the ring.
	fs := make([]float64, count*40)
	for i := range fs {
		fs[i] = float64(me + i)
	}
	fsum := make([]float64, len(fs))
	if err := add("Iallreduce Sum")(Iallreduce(c, fs, fsum, Sum)); err != nil {
		return err
	}
	gs := make([]int64, count)
	for i := range gs {
		gs[i] = int64(me*100000 + i)
	}
	var gath []int64
	if me == 0 {
		gath = make([]int64, p*count)
	}
	if err := add("Igather")(Igather(c, gs, gath, 0)); err != nil {
		return err
	}
	var scs []int16
	sroot := (p + 1) / 3
	if me == sroot {
		scs = make([]int16, p*count)
		for i := range scs {
			scs[i] = int16(i)
		}
	}
	sc := make([]int16, count)
	if err := add("Iscatter")(Iscatter(c, scs, sc, sroot)); err != nil {
		return err
	}
	ag := make([]int64, p*count)
	if err := add("Iallgather")(Iallgather(c, gs, ag)); err != nil {
		return err
	}
	a2s := make([]int32, p*count)
	for i := range a2s {
		a2s[i] = int32(me*1000000 + i)
	}
	a2r := make([]int32, p*count)
	if err := add("Ialltoall")(Ialltoall(c, a2s, a2r)); err != nil {
		return err
	}
	// Blocking calls while those are in flight.
	one := []int64{int64(me)}
	if err := Allreduce(c, one, one, Sum); err != nil {
		return err
	}
	if want := int64(p * (p - 1) / 2); one[0] != want {
		return fmt.Errorf("Allreduce among nonblocking calls: %d, want %d", one[0], want)
	}
	if p > 1 {
		got := make([]int32, 3)
		if _, err := Sendrecv(c, []int32{int32(me), 1, 2}, (me+1)%p, 5, got, (me-1+p)%p, 5); err != nil {
			return err
		}
		if got[0] != int32((me-1+p)%p) {
			return fmt.Errorf("Sendrecv among nonblocking calls: %v", got)
		}
	}
	// Completion in an order of each rank's own: by WaitAny from odd
	// ranks, backwards from even ones.
	if me%2 == 1 {
		left := append([]*Request(nil), reqs...)
		for range left {
			i, _, err := WaitAny(left...)
			if err != nil {
				return fmt.Errorf("%s: %w", names[i], err)
			}
			left[i] = nil
		}
	} else {
		for i := len(reqs) - 1; i >= 0; i-- {
			if _, err := reqs[i].Wait(); err != nil {
				return fmt.Errorf("%s: %w", names[i], err)
			}
		}
	}
	// A completed Request reports again.
	if done, err := TestAll(reqs...); !done || err != nil {
		return fmt.Errorf("TestAll after every Wait: %v %v", done, err)
	}
	for i := range bc {
		if bc[i] != int32(i*3+7) {
			return fmt.Errorf("Ibcast rank %d [%d] = %d", me, i, bc[i])
		}
	}
	fold := func(i int) uint64 {
		v := affineVal(0, i)
		for r := 1; r < p; r++ {
			v = affine(v, affineVal(r, i))
		}
		return v
	}
	for i := range ared {
		if ared[i] != fold(i) || me == rroot && red[i] != fold(i) {
			return fmt.Errorf("Ireduce/Iallreduce (non-commutative) rank %d [%d] = %#x, %#x, want %#x", me, i, red[i], ared[i], fold(i))
		}
	}
	for i := range fsum {
		if want := float64(p*(p-1)/2 + p*i); fsum[i] != want {
			return fmt.Errorf("Iallreduce Sum rank %d [%d] = %v, want %v", me, i, fsum[i], want)
		}
	}
	for r := range p {
		for i := range count {
			want := int64(r*100000 + i)
			if me == 0 && gath[r*count+i] != want {
				return fmt.Errorf("Igather [%d][%d] = %d", r, i, gath[r*count+i])
			}
			if ag[r*count+i] != want {
				return fmt.Errorf("Iallgather rank %d [%d][%d] = %d", me, r, i, ag[r*count+i])
			}
			if a2r[r*count+i] != int32(r*1000000+me*count+i) {
				return fmt.Errorf("Ialltoall rank %d [%d][%d] = %d", me, r, i, a2r[r*count+i])
			}
		}
	}
	for i := range sc {
		if sc[i] != int16(me*count+i) {
			return fmt.Errorf("Iscatter rank %d [%d] = %d", me, i, sc[i])
		}
	}
	return nil
}

// TestIcoll: every nonblocking collective, all in flight together, for
// 1-9 ranks and odd counts, clean and under injected faults.
func TestIcoll(t *testing.T) {
	for _, faults := range faultCases {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			t.Setenv("WEFT_TIMEOUT", "60s")
			for n := 1; n <= 9; n++ {
				for _, count := range []int{1, 3, 77, 1001} {
					if faults != "" && (n%3 != 2 || count > 77) {
						continue
					}
					for round := range 2 { // twice: the second call's tags differ
						if err := Run(n, func(c *Comm) error { return icollCase(c, count) }); err != nil {
							t.Fatalf("%d ranks, %d elements, round %d: %v", n, count, round, err)
						}
					}
				}
			}
		})
	}
}

// TestIcollProgress: a nonblocking collective completes while its caller
// only calls Test, and while it calls nothing at all (the progress
// goroutine), on every rank at once.
func TestIcollProgress(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "60s")
	for _, n := range []int{2, 4, 5} {
		err := Run(n, func(c *Comm) error {
			me, p := c.Rank(), c.Size()
			buf := make([]float64, 100000) // the ring, by rendezvous
			for i := range buf {
				buf[i] = float64(me)
			}
			q, err := Iallreduce(c, buf, buf, Sum)
			if err != nil {
				return err
			}
			tests := 0
			for {
				done, _, err := q.Test()
				if err != nil {
					return err
				}
				if done {
					break
				}
				tests++
				runtime.Gosched()
			}
			if want := float64(p * (p - 1) / 2); buf[0] != want || buf[len(buf)-1] != want {
				return fmt.Errorf("Test-driven Iallreduce: %v, want %v", buf[0], want)
			}
			// Now with no call at all until it is done: only the
			// progress goroutine moves it.
			b := make([]int32, 5000)
			if me == 0 {
				for i := range b {
					b[i] = int32(i)
				}
			}
			q, err = Ibcast(c, b, 0)
			if err != nil {
				return err
			}
			deadline := time.Now().Add(60 * time.Second)
			for !q.op.done.Load() {
				if time.Now().After(deadline) {
					return fmt.Errorf("rank %d: Ibcast not done after 60 s without calls", me)
				}
				runtime.Gosched()
			}
			if _, err := q.Wait(); err != nil {
				return err
			}
			if b[4999] != 4999 {
				return fmt.Errorf("Ibcast without calls: b[4999] = %d", b[4999])
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
	}
}

// TestIcollArgs: bad arguments fail with ErrArg or ErrRank naming them on
// the ranks that see them and end the call on every rank; ranks that
// disagree (lengths, or which collective) get an error, not a hang.
func TestIcollArgs(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	err := Run(3, func(c *Comm) error {
		me := c.Rank()
		if _, err := Ibcast(c, []int32{1}, 3); !errors.Is(err, ErrRank) {
			return fmt.Errorf("Ibcast root 3 of 3: %v", err)
		}
		if _, err := Iallreduce(c, make([]int32, 3), make([]int32, 2), Sum); !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "recv has 2") {
			return fmt.Errorf("Iallreduce with a short recv: %v", err)
		}
		if _, err := Iallreduce(c, make([]int32, 3), make([]int32, 3), affineOp); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Iallreduce of int32 with an op of uint64: %v", err)
		}
		if _, err := Ialltoall(c, make([]int32, 4), make([]int32, 4)); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Ialltoall of 4 on 3 ranks: %v", err)
		}
		// Only the root sees its short recv; the others only send, so
		// they may complete (a rank whose part is right may), or fail
		// with the root's abort.
		var rv []int64
		if me == 1 {
			rv = make([]int64, 2)
		}
		if q, err := Igather(c, make([]int64, 1), rv, 1); me == 1 && !errors.Is(err, ErrArg) {
			return fmt.Errorf("Igather into a short recv at root: %v", err)
		} else if me != 1 {
			if err == nil {
				_, err = q.Wait()
			}
			if err != nil && !errors.Is(err, ErrArg) {
				return fmt.Errorf("rank %d: Igather whose root failed: %v", me, err)
			}
		}
		// Different lengths.
		n := 4
		if me == 2 {
			n = 5
		}
		q, err := Iallreduce(c, make([]int32, n), make([]int32, n), Sum)
		if err == nil {
			_, err = q.Wait()
		}
		if !errors.Is(err, ErrArg) {
			return fmt.Errorf("rank %d: Iallreduce of different lengths: %v", me, err)
		}
		// Different collectives: Ibcast on rank 0, Ibarrier elsewhere.
		if me == 0 {
			q, err = Ibcast(c, make([]byte, 8), 0)
		} else {
			q, err = c.Ibarrier()
		}
		if err == nil {
			_, err = q.Wait()
		}
		if me != 0 && !errors.Is(err, ErrArg) {
			return fmt.Errorf("rank %d: Ibarrier against an Ibcast: %v", me, err)
		}
		// The communicator still works.
		return icollCase(c, 5)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIcollInFlight: a nonblocking collective that has not completed is
// counted in flight (what Finalize reports as outstanding), and is no
// longer once it has.
func TestIcollInFlight(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "30s")
	started := make(chan struct{})
	err := Run(2, func(c *Comm) error {
		b := make([]int32, 3)
		if c.Rank() == 1 {
			<-started // rank 0's Ibcast waits for this rank's data
			b[2] = 9
		}
		q, err := Ibcast(c, b, 1)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			if n := c.w.icoll.inFlight(); n != 1 {
				return fmt.Errorf("in flight before the root called: %d, want 1", n)
			}
			close(started)
		}
		if _, err := q.Wait(); err != nil {
			return err
		}
		if n := c.w.icoll.inFlight(); n != 0 || b[2] != 9 {
			return fmt.Errorf("rank %d after Wait: %d in flight, b = %v", c.Rank(), n, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIcollDevices: the nonblocking collectives over the shm and udp
// devices (ranks in one process, each on its own device), and their
// progress with no call at all: a device may hold what a call sent until
// lapi's next pass, which nothing but the progress goroutine then makes.
func TestIcollDevices(t *testing.T) {
	for _, dev := range []string{"shm", "udp"} {
		t.Run(dev, func(t *testing.T) {
			const n = 3
			worlds := devWorlds(t, dev, n)
			err := runWorlds(worlds, func(c *Comm) error {
				for _, count := range []int{1, 77, 3001} {
					if err := icollCase(c, count); err != nil {
						return err
					}
				}
				b := make([]int32, 40000) // by rendezvous
				f := make([]float64, 30000)
				for i := range f {
					f[i] = float64(c.Rank())
				}
				if c.Rank() == 0 {
					for i := range b {
						b[i] = int32(i)
					}
				}
				qb, err := Ibcast(c, b, 0)
				if err != nil {
					return err
				}
				qa, err := Iallreduce(c, f, f, Sum)
				if err != nil {
					return err
				}
				deadline := time.Now().Add(30 * time.Second)
				for !qb.op.done.Load() || !qa.op.done.Load() {
					if time.Now().After(deadline) {
						return fmt.Errorf("rank %d: Ibcast and Iallreduce not done after 30 s without calls", c.Rank())
					}
					runtime.Gosched()
				}
				if err := WaitAll(qb, qa); err != nil {
					return err
				}
				if b[39999] != 39999 || f[29999] != 3 {
					return fmt.Errorf("rank %d: without calls: b[39999] = %d, f[29999] = %v", c.Rank(), b[39999], f[29999])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIcollLeakCount: a nonblocking collective left in flight at Finalize
// counts once, though its rendezvous sends sit in the request table.
func TestIcollLeakCount(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		big := make([]float64, 1<<16) // 512 KiB: rendezvous
		if c.Rank() == 1 {
			q, err := Ibcast(c, big, 1) // rank 0 never calls it
			if err != nil {
				return err
			}
			_ = q
		}
		w := c.World()
		if c.Rank() == 1 {
			w.mu.Lock()
			live, inFlight := w.reqs.live(), w.icoll.inFlight()
			w.mu.Unlock()
			if live != 0 || inFlight != 1 {
				return fmt.Errorf("an Ibcast in flight: %d point-to-point requests tabled, %d collectives in flight; want 0 and 1", live, inFlight)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIcollFailedPeer: a member failed before a nonblocking Iallreduce
// began. Rank 1's Request fails with ErrPeerFailed: a round
// whose receive from the failed member could not be posted used to post
// its sends anyway, lose the receive's error and complete, and Wait
// returned nil with this rank's own data as the sum.
func TestIcollFailedPeer(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	t.Setenv("WEFT_DIRECT", "0")
	t.Setenv("WEFT_EAGER", "1048576")
	errs := make([]error, 3)
	err := Run(3, func(c *Comm) error {
		if c.Rank() == 0 {
			return errors.New("rank 0 fails first")
		}
		if _, err := Recv(c, make([]byte, 1), 0, 0); !errors.Is(err, ErrPeerFailed) {
			return fmt.Errorf("receive from the failed rank 0: %v", err)
		}
		if c.Rank() == 2 {
			return nil // so that no abort from it tells rank 1
		}
		b := make([]float64, 16<<10) // 128 KiB: the ring
		for i := range b {
			b[i] = 1
		}
		q, err := Iallreduce(c, b, b, Sum)
		if err == nil {
			_, err = q.Wait()
		}
		if err == nil {
			err = fmt.Errorf("Iallreduce returned nil, b[0] = %v", b[0])
		}
		errs[c.Rank()] = err
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "rank 0 fails") {
		t.Errorf("Run: %v, want rank 0's error", err)
	}
	if !errors.Is(errs[1], ErrPeerFailed) {
		t.Errorf("rank 1: %v, want ErrPeerFailed", errs[1])
	}
}

// TestIcollTimeout: Wait on a nonblocking collective is bounded by
// WEFT_TIMEOUT as every blocking wait is (it waited for ever), and
// WaitSome reports the failed wait with the pending request instead of
// returning the empty answer that means nothing is pending.
func TestIcollTimeout(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "300ms")
	var waitErr, someErr error
	var waited time.Duration
	var some []int
	_ = Run(2, func(c *Comm) error {
		if c.Rank() == 1 {
			return nil // never joins the Ibarrier
		}
		q, err := c.Ibarrier()
		if err != nil {
			return err
		}
		start := time.Now()
		_, waitErr = q.Wait()
		waited = time.Since(start)
		var errs []error
		some, _, errs = WaitSome(q)
		if len(errs) > 0 {
			someErr = errs[0]
		}
		return nil
	})
	if !errors.Is(waitErr, ErrTimeout) || waited > 10*time.Second {
		t.Errorf("Wait on an Ibarrier rank 1 never joins: %v after %v, want ErrTimeout", waitErr, waited)
	}
	if len(some) != 1 || some[0] != 0 || !errors.Is(someErr, ErrTimeout) {
		t.Errorf("WaitSome: indices %v, first error %v; want [0] with ErrTimeout", some, someErr)
	}
}

// TestIcollMismatchWaitedOtherwise: two ranks call Ibcast each with the
// other as the root. Whether a rank waits by Wait, WaitAny, a TestAll
// loop or a Test loop, the signatures are compared and the Request fails
// with ErrArg: only Wait had the call watched, and the others waited
// until the timeout or for ever.
func TestIcollMismatchWaitedOtherwise(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "10s")
	for _, how := range []string{"Wait", "WaitAny", "TestAll", "Test"} {
		err := Run(2, func(c *Comm) error {
			q, err := Ibcast(c, make([]int32, 4), 1-c.Rank())
			if err != nil {
				return err
			}
			start := time.Now()
			switch how {
			case "Wait":
				_, err = q.Wait()
			case "WaitAny":
				_, _, err = WaitAny(q)
			case "TestAll":
				for done := false; !done && time.Since(start) < 8*time.Second; {
					done, err = TestAll(q)
				}
			case "Test":
				done := false
				for !done && time.Since(start) < 8*time.Second {
					done, _, err = q.Test()
				}
				if !done {
					err = errors.New("not done after 8 s of Test")
				}
			}
			if !errors.Is(err, ErrArg) {
				return fmt.Errorf("rank %d, %s, after %v: %v, want ErrArg", c.Rank(), how, time.Since(start).Round(time.Millisecond), err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// TestIcollFreeInFlight: a communicator freed while a nonblocking
// collective on it is in flight lets the collective complete, as Free
// says: its later rounds used to fail with "communicator was freed" at
// the ranks that passed the data on, and their children never got it.
func TestIcollFreeInFlight(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	err := Run(4, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		b := make([]int32, 4)
		if d.Rank() == 3 {
			b[0] = 7
		}
		q, err := Ibcast(d, b, 3)
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		if _, err := q.Wait(); err != nil {
			return fmt.Errorf("rank %d: %w", c.Rank(), err)
		}
		if b[0] != 7 {
			return fmt.Errorf("rank %d: %v, want 7 from rank 3", c.Rank(), b)
		}
		return c.Barrier()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIcollMismatchOld: a mismatched Ibcast waited for after more calls
// than the ring of signatures keeps (17 Barriers) still fails with ErrArg:
// its signature is held while it is in flight. It used to wait until the
// timeout, with nothing left to compare.
func TestIcollMismatchOld(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "10s")
	err := Run(2, func(c *Comm) error {
		q, err := Ibcast(c, make([]int32, 4), 1-c.Rank())
		if err != nil {
			return err
		}
		for range sigRing + 1 {
			if err := c.Barrier(); err != nil {
				return err
			}
		}
		start := time.Now()
		if _, err := q.Wait(); !errors.Is(err, ErrArg) {
			return fmt.Errorf("rank %d: Wait after %d more calls: %v after %v, want ErrArg", c.Rank(), sigRing+1, err, time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
