package mpi

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
)

// mismatchCase runs collective kind on c with n elements at this rank,
// the lengths every variant of the collective takes from n.
func mismatchCase(c *Comm, kind string, n int) error {
	p := c.Size()
	mine := make([]float64, n)
	for i := range mine {
		mine[i] = float64(c.Rank() + i)
	}
	switch kind {
	case "Allreduce":
		return Allreduce(c, mine, make([]float64, n), Sum)
	case "Allgather":
		return Allgather(c, mine, make([]float64, p*n))
	case "Alltoall":
		return Alltoall(c, make([]float64, p*n), make([]float64, p*n))
	case "Bcast":
		return Bcast(c, mine, 0)
	case "Reduce":
		return Reduce(c, mine, make([]float64, n), Sum, 0)
	case "Gather":
		return Gather(c, mine, make([]float64, p*n), 0)
	case "Scatter":
		return Scatter(c, make([]float64, p*n), mine, 0)
	}
	return fmt.Errorf("no collective %q", kind)
}

// TestCollectiveMismatch: ranks that pass different lengths to a
// collective get an error wrapping ErrArg, on every algorithm the lengths
// select (shared memory, recursive doubling, ring, direct reads,
// accumulate, binomial and scatter-allgather broadcasts, Bruck and ring
// allgathers), including when the two lengths select different ones; none
// hangs (WEFT_TIMEOUT turns a hang into ErrTimeout, which fails the test),
// and the communicator goes on. In the symmetric collectives every rank
// fails; in the rooted ones the ranks that receive from a rank that
// differs do (the others' data is right, and a rank that only sends may
// have left before anyone could tell it).
func TestCollectiveMismatch(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	pairs := [][2]int{{10, 11}, {1000, 15}, {256, 257}, {8192, 8193}, {100000, 100001}, {200000, 20}}
	kinds := []string{"Allreduce", "Allgather", "Alltoall", "Bcast", "Reduce", "Gather", "Scatter"}
	if testing.Short() {
		pairs = [][2]int{{10, 11}, {1000, 15}, {100000, 100001}}
	}
	for _, shm := range []string{"on", "off"} {
		for _, ranks := range []int{2, 3} {
			t.Run(fmt.Sprintf("shmcoll=%s/n=%d", shm, ranks), func(t *testing.T) {
				t.Setenv("WEFT_SHMCOLL", shm)
				for _, kind := range kinds {
					for _, pair := range pairs {
						if kind == "Alltoall" && pair[0] > 10000 {
							continue // p*n elements per rank: the large pairs add nothing
						}
						checkMismatch(t, ranks, kind, pair)
					}
				}
			})
		}
	}
}

func checkMismatch(t *testing.T, ranks int, kind string, pair [2]int) {
	t.Helper()
	checkMismatchOn(t, Run, ranks, kind, pair)
}

// checkMismatchOn is checkMismatch with the ranks started by run.
func checkMismatchOn(t *testing.T, run func(int, func(*Comm) error) error, ranks int, kind string, pair [2]int) {
	t.Helper()
	errs := make([]error, ranks)
	after := make([]error, ranks)
	err := run(ranks, func(c *Comm) error {
		n := pair[0]
		if c.Rank() == ranks-1 {
			n = pair[1]
		}
		errs[c.Rank()] = mismatchCase(c, kind, n)
		// The communicator goes on: nothing the failed call left behind
		// may be taken for a later call's data (a broadcast's root may
		// finish the bad call without hearing of its abort).
		after[c.Rank()] = allreducesAfter(c)
		return nil
	})
	if err != nil {
		t.Fatalf("%s %v on %d ranks: %v", kind, pair, ranks, err)
	}
	for r, e := range errs {
		must := true // symmetric: every rank receives from one that differs
		switch kind {
		case "Bcast", "Scatter":
			must = r == ranks-1 // receives root 0's data, of another length
		case "Reduce", "Gather":
			must = r == 0 // the root receives, from a rank that differs
		}
		switch {
		case e == nil && must:
			t.Errorf("%s %v on %d ranks: rank %d returned nil", kind, pair, ranks, r)
		case e != nil && (!errors.Is(e, ErrArg) || errors.Is(e, ErrTimeout)):
			t.Errorf("%s %v on %d ranks: rank %d: %v, want ErrArg", kind, pair, ranks, r, e)
		case e != nil && !strings.Contains(e.Error(), "disagree") && !strings.Contains(e.Error(), "aborted"):
			t.Errorf("%s %v on %d ranks: rank %d: %v, want it to name the disagreement", kind, pair, ranks, r, e)
		}
		if after[r] != nil {
			t.Errorf("%s %v on %d ranks: rank %d: %v", kind, pair, ranks, r, after[r])
		}
	}
}

// allreducesAfter runs four Allreduces on c after a call that failed, or
// that its ranks disagreed on: the first three may fail with ErrArg
// naming a disagreement or an abort (a rank that finished the bad call
// may hear of its abort, or find the disagreement, a call or two later:
// stray.go), none may give a wrong result, and the last is exact. Every
// rank runs all four: after an abort, a node-aware call may fail at one
// rank and succeed at another (doc.go).
func allreducesAfter(c *Comm) error {
	p := c.Size()
	var first error // the first problem; every call is made anyway
	for i := range 4 {
		v := []float64{float64(c.Rank()), 1}
		err := Allreduce(c, v, v, Sum)
		want := float64(p * (p - 1) / 2)
		switch {
		case first != nil:
		case err != nil && (i == 3 || !errors.Is(err, ErrArg) ||
			!strings.Contains(err.Error(), "disagree") && !strings.Contains(err.Error(), "abort")):
			first = fmt.Errorf("allreduce %d after: %w", i+1, err)
		case err == nil && (v[0] != want || v[1] != float64(p)):
			first = fmt.Errorf("allreduce %d after: %v, want [%v %v]", i+1, v, want, p)
		}
	}
	return first
}

// TestCollectiveOpRootMismatch: ranks that agree on the length but not
// on the op (Allreduce, Iallreduce, Reduce) or the root (Bcast, Reduce,
// Gather, Scatter) get ErrArg, never a result reduced with another op or
// taken from another root: the op used to go unseen (no size differed, no
// wait blocked) and every rank returned its own wrong sum. In Allreduce
// and Iallreduce every rank fails; in the rooted ones at least one does
// where any rank receives, and none returns a wrong result. The
// communicator goes on.
func TestCollectiveOpRootMismatch(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	sizes := []int{10, 1000, 100000}
	for _, shm := range []string{"on", "off"} {
		for _, ranks := range []int{2, 3} {
			t.Run(fmt.Sprintf("shmcoll=%s/n=%d", shm, ranks), func(t *testing.T) {
				t.Setenv("WEFT_SHMCOLL", shm)
				for _, kind := range []string{"Allreduce", "Iallreduce", "Reduce-op", "Bcast", "Reduce", "Gather", "Scatter"} {
					for _, n := range sizes {
						checkOpRootMismatch(t, func(fn func(*Comm) error) error { return Run(ranks, fn) }, ranks, kind, n)
					}
				}
			})
		}
	}
}

// checkOpRootMismatch has run's ranks (ranks of them) call collective
// kind of n elements, the last rank with another op (Max, not Sum) or
// root (1, not 0): some rank must fail with ErrArg, none may return nil
// with another result than the one it asked for, and the communicator
// must go on.
func checkOpRootMismatch(t *testing.T, run func(func(*Comm) error) error, ranks int, kind string, n int) {
	t.Helper()
	errs := make([]error, ranks)
	wrong := make([]string, ranks)
	after := make([]error, ranks)
	err := run(func(c *Comm) error {
		p, odd := c.Size(), c.Rank() == c.Size()-1
		op, root := Sum, 0
		if odd {
			op, root = Max, 1
		}
		mine := make([]float64, n)
		for i := range mine {
			mine[i] = float64(c.Rank() + 1)
		}
		sum := float64(p * (p + 1) / 2)
		var err error
		switch kind {
		case "Allreduce", "Iallreduce":
			recv := make([]float64, n)
			if kind == "Allreduce" {
				err = Allreduce(c, mine, recv, op)
			} else {
				var q *Request
				if q, err = Iallreduce(c, mine, recv, op); err == nil {
					_, err = q.Wait()
				}
			}
			if err == nil && recv[n-1] != sum {
				wrong[c.Rank()] = fmt.Sprintf("sum %v, want %v", recv[n-1], sum)
			}
		case "Reduce-op":
			recv := make([]float64, n)
			if err = Reduce(c, mine, recv, op, 0); err == nil && c.Rank() == 0 && recv[n-1] != sum {
				wrong[0] = fmt.Sprintf("sum %v, want %v", recv[n-1], sum)
			}
		default:
			err = mismatchRoot(c, kind, mine, root)
			if err == nil && kind == "Bcast" && mine[n-1] != float64(root+1) {
				wrong[c.Rank()] = fmt.Sprintf("rank %d's data, asked for root %d's", int(mine[n-1])-1, root)
			}
		}
		errs[c.Rank()] = err
		after[c.Rank()] = allreducesAfter(c)
		return nil
	})
	if err != nil {
		t.Fatalf("%s of %d on %d ranks: %v", kind, n, ranks, err)
	}
	failed := 0
	for r, e := range errs {
		switch {
		case e != nil && (!errors.Is(e, ErrArg) || errors.Is(e, ErrTimeout)):
			t.Errorf("%s of %d on %d ranks: rank %d: %v, want ErrArg", kind, n, ranks, r, e)
		case e != nil:
			failed++
		case kind == "Allreduce" || kind == "Iallreduce":
			t.Errorf("%s of %d on %d ranks: rank %d returned nil (%s)", kind, n, ranks, r, wrong[r])
		}
		if wrong[r] != "" && e == nil {
			t.Errorf("%s of %d on %d ranks: rank %d: a wrong result without an error: %s", kind, n, ranks, r, wrong[r])
		}
		if after[r] != nil {
			t.Errorf("%s of %d on %d ranks: rank %d after: %v", kind, n, ranks, r, after[r])
		}
	}
	if failed == 0 && !(ranks == 2 && (kind == "Bcast" || kind == "Scatter")) {
		// (On two ranks whose roots are 0 and 1, each is a root of a
		// Bcast or Scatter: it only sends, and receives nothing wrong.)
		t.Errorf("%s of %d on %d ranks: no rank failed", kind, n, ranks)
	}
}

// mismatchRoot runs rooted collective kind with this rank's root.
func mismatchRoot(c *Comm, kind string, mine []float64, root int) error {
	n, p := len(mine), c.Size()
	switch kind {
	case "Bcast":
		return Bcast(c, mine, root)
	case "Reduce":
		return Reduce(c, mine, make([]float64, n), Sum, root)
	case "Gather":
		return Gather(c, mine, make([]float64, p*n), root)
	case "Scatter":
		return Scatter(c, make([]float64, p*n), mine, root)
	}
	return fmt.Errorf("no collective %q", kind)
}

// TestAbortCarriesCause: when a collective fails on one rank, the members
// that hear of it by the call's abort get an error wrapping the same
// sentinel (a peer's failure stays ErrPeerFailed, a timeout ErrTimeout),
// and any other (a truncation, a bad rank, no sentinel) comes as ErrArg. Rank 0 fails a Barrier
// of its own with the cause while the others wait in theirs.
func TestAbortCarriesCause(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	t.Setenv("WEFT_SHMCOLL", "off")
	for _, tc := range []struct {
		cause, want error
	}{
		{fmt.Errorf("rank 5: %w", ErrPeerFailed), ErrPeerFailed},
		{&TimeoutError{Rank: 0, Waiting: "a test"}, ErrTimeout},
		{fmt.Errorf("got 9 bytes: %w", ErrTruncate), ErrArg},
		{fmt.Errorf("rank 9 of 3: %w", ErrRank), ErrArg},
		{ErrArg, ErrArg},
		{errors.New("a cause mpi has no sentinel for"), ErrArg},
	} {
		errs := make([]error, 3)
		err := Run(3, func(c *Comm) error {
			if c.Rank() == 0 {
				if err := c.begin(collBarrier, 0, 0, 0); err != nil {
					return err
				}
				errs[0] = c.end(tc.cause)
			} else {
				errs[c.Rank()] = c.Barrier()
			}
			return nil
		})
		if err != nil {
			t.Fatalf("cause %v: Run: %v", tc.cause, err)
		}
		for r := 1; r < 3; r++ {
			if !errors.Is(errs[r], tc.want) || !strings.Contains(fmt.Sprint(errs[r]), "rank 0") {
				t.Errorf("cause %v: rank %d: %v, want an abort from rank 0 wrapping %v", tc.cause, r, errs[r], tc.want)
			}
			for _, other := range abortCauses {
				if other != tc.want && errors.Is(errs[r], other) {
					t.Errorf("cause %v: rank %d: %v wraps %v too", tc.cause, r, errs[r], other)
				}
			}
		}
	}
}

// TestRootedAbortThenBarrier: the root of a small rooted collective
// finds its own arguments wrong (ErrArg); the other ranks, which only
// send, may return nil (doc.go), having gone through the shared block.
// "The communicator stays usable": the next Barrier must succeed on
// every rank, though some begin it in the block before they hear of the
// abort (every rank goes by messages from the call after the aborted
// one).
func TestRootedAbortThenBarrier(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, which := range []string{"gather", "gatherv", "reduce", "scatter"} {
		err := Run(4, func(c *Comm) error {
			const root = 2
			one := []int32{int32(c.Rank())}
			var err error
			switch which {
			case "gather":
				err = Gather(c, one, make([]int32, 3), root) // root's recv one short
			case "gatherv":
				err = Gatherv(c, one, make([]int32, 4), []int{1, 1, 1, 1}, []int{0, 1, 2, 4}, root)
			case "reduce":
				err = Reduce(c, one, make([]int32, 2), Sum, root) // root's recv the wrong length
			case "scatter":
				err = Scatter(c, make([]int32, 3), one, root) // root's send one short
			}
			if c.Rank() == root && !errors.Is(err, ErrArg) {
				return fmt.Errorf("%s: root got %v, want ErrArg", which, err)
			}
			if err := c.Barrier(); err != nil {
				return fmt.Errorf("%s: Barrier after: %w", which, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// TestSigUserOpsAgree: a member's signature holds no user op's number,
// as the call's digest holds none: the numbers are local to their process,
// so one op may have different numbers at different ranks, and ranks
// that compared them failed a legitimate call, and only when a rank was
// late enough for the others' wait to compare signatures.
func TestSigUserOpsAgree(t *testing.T) {
	fn := func(inout, in []uint64) {}
	a, b := NewOp(fn, false), NewOp(fn, false)
	for _, kind := range []uint8{collAllreduce, collIallreduce, collReduce, collScan} {
		a0, a1 := packSig(7, kind, a, 1, 16, false)
		b0, b1 := packSig(7, kind, b, 1, 16, false)
		if a0 != b0 || a1 != b1 {
			t.Errorf("%s: user ops %d and %d sign %x,%x and %x,%x: ranks would be told they disagree",
				collNames[kind], a, b, a0, a1, b0, b1)
		}
		if d := describeSig(a0, a1); !strings.Contains(d, "a user op") {
			t.Errorf("%s: described as %q, want it to say a user op", collNames[kind], d)
		}
		if s0, _ := packSig(7, kind, Sum, 1, 16, false); s0 == a0 {
			t.Errorf("%s: Sum and a user op sign alike", collNames[kind])
		}
	}
}

// TestIcollMismatchNamed: ranks whose nonblocking collectives disagree on
// the op or the root fail with ErrArg naming what differs, as the
// blocking ones do (the error described both calls alike).
func TestIcollMismatchNamed(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	odd := func(c *Comm, a, b Op) Op {
		if c.Rank() == 1 {
			return b
		}
		return a
	}
	cases := []struct {
		name string
		call func(c *Comm) (*Request, error)
		want []string
	}{
		{"Iallreduce Sum/Max", func(c *Comm) (*Request, error) {
			return Iallreduce(c, make([]int64, 2), make([]int64, 2), odd(c, Sum, Max))
		}, []string{"Sum", "Max"}},
		{"Ireduce Sum/Prod", func(c *Comm) (*Request, error) {
			return Ireduce(c, make([]int64, 2), make([]int64, 2), odd(c, Sum, Prod), 0)
		}, []string{"Sum", "Prod"}},
		{"Ibcast root 0/1", func(c *Comm) (*Request, error) {
			return Ibcast(c, make([]int32, 3), c.Rank()%2)
		}, []string{"root 0", "root 1"}},
	}
	for _, tc := range cases {
		var failed atomic.Int32
		err := Run(2, func(c *Comm) error {
			q, err := tc.call(c)
			if err == nil {
				_, err = q.Wait()
			}
			if err == nil && tc.name != "Iallreduce Sum/Max" {
				return nil // a rank that only sends in a rooted collective may return nil (doc.go)
			}
			failed.Add(1)
			if !errors.Is(err, ErrArg) {
				return fmt.Errorf("rank %d: %v, want ErrArg", c.Rank(), err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					return fmt.Errorf("rank %d: error %q does not name %q", c.Rank(), err, w)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if failed.Load() == 0 && !strings.HasPrefix(tc.name, "Ibcast") {
			// (Ibcast's two ranks are both roots that only send: each
			// finishes, and is told by its next call,
			// TestRootsDisagreeTold.)
			t.Errorf("%s: no rank failed: some rank must be told of the mismatch", tc.name)
		}
	}
}

// TestRootsDisagreeTold: ranks that name different roots in a rooted
// nonblocking call, where each such root only sends, finish the call with
// their own data, but are told by one of their next collectives on the
// communicator, which fails with ErrArg naming both calls (stray.go); the
// calls after it work.
func TestRootsDisagreeTold(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	// By messages: through the shared block, which polls no device, the
	// signatures may come too late to be reported (stray.go's lateWindow).
	t.Setenv("WEFT_SHMCOLL", "off")
	for _, roots := range [][]int{{0, 1}, {0, 1, 0}, {1, 0, 0, 2}} {
		t.Run(fmt.Sprint(roots), func(t *testing.T) {
			err := Run(len(roots), func(c *Comm) error {
				buf := []int32{int32(c.Rank()), 2, 3}
				q, err := Ibcast(c, buf, roots[c.Rank()])
				if err == nil {
					_, err = q.Wait()
				}
				// A rank that receives may be told by the call itself;
				// one that only sent, by one of the three after it.
				for i := 0; i < lateWindow+1 && err == nil; i++ {
					err = c.Barrier()
				}
				if !errors.Is(err, ErrArg) {
					return fmt.Errorf("rank %d: %v, want ErrArg", c.Rank(), err)
				}
				if named := regexp.MustCompile(`Ibcast of 12 bytes from root \d`).FindAllString(err.Error(), -1); len(named) != 2 || named[0] == named[1] {
					return fmt.Errorf("rank %d: error %q does not name two Ibcasts from different roots", c.Rank(), err)
				}
				if n := strings.Count(err.Error(), ErrArg.Error()); n != 1 {
					return fmt.Errorf("rank %d: error %q says %q %d times", c.Rank(), err, ErrArg, n)
				}
				// The communicator is usable after the failed call.
				sum := []int64{1}
				if err := Allreduce(c, sum, sum, Sum); err != nil || sum[0] != int64(c.Size()) {
					return fmt.Errorf("rank %d: Allreduce after: %v, sum %d", c.Rank(), err, sum[0])
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
}
