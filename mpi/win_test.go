package mpi

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/udp"
)

// winFaults are the device conditions the window tests run under: a
// reliable in-process device, and one that loses, reorders, duplicates
// and corrupts frames (lapi's reliability, and its RDMA redrives, below).
var winFaults = []string{"", "loss=0.05,reorder=0.1,dup=0.02,corrupt=0.01,seed=11"}

// runWinCases runs fn on each number of ranks in ns, under each of
// winFaults.
func runWinCases(t *testing.T, fn func(*Comm) error, ns []int) {
	t.Helper()
	for _, faults := range winFaults {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for _, n := range ns {
				if err := Run(n, fn); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

// winLen is rank r's window length in the tests: odd, and different at
// every rank, so that bounds are per target.
func winLen(r, scale int) int { return scale + 3*r + 1 }

// winFenceCase runs, on c, a round of Puts, one of Gets and one of
// Accumulates between Fences over windows of scale+3r+1 elements of T,
// at odd displacements, and checks every window and buffer.
func winFenceCase[T Elem](c *Comm, scale int) error {
	p, me := c.Size(), c.Rank()
	base := make([]T, winLen(me, scale))
	win, err := NewWin(c, base)
	if err != nil {
		return err
	}
	// Puts: rank r writes chunk (r, t) of len(t's window)/p elements at
	// displacement r*chunk+1 (the last rank's chunk ends one short) of
	// every target t, itself included.
	chunk := func(t int) int { return (winLen(t, scale) - 2) / p }
	val := func(r, t, i int) T { return value[T](r, t, i) }
	if err := win.Fence(); err != nil {
		return err
	}
	for i := range p {
		t := (me + i) % p
		src := make([]T, chunk(t))
		for k := range src {
			src[k] = val(me, t, k)
		}
		if err := win.Put(src, t, me*chunk(t)+1); err != nil {
			return err
		}
	}
	if err := win.Fence(); err != nil {
		return err
	}
	for r := range p {
		for k := range chunk(me) {
			if got, want := base[r*chunk(me)+1+k], val(r, me, k); got != want {
				return fmt.Errorf("after Put: window[%d] (from rank %d) = %v, want %v", r*chunk(me)+1+k, r, got, want)
			}
		}
	}
	// Gets: every rank reads the whole of every target's chunks back.
	got := make([][]T, p)
	for t := range p {
		got[t] = make([]T, p*chunk(t))
		if err := win.Get(got[t], t, 1); err != nil {
			return err
		}
	}
	if err := win.Fence(); err != nil {
		return err
	}
	for t := range p {
		for r := range p {
			for k := range chunk(t) {
				if g, want := got[t][r*chunk(t)+k], val(r, t, k); g != want {
					return fmt.Errorf("Get from rank %d: element %d = %v, want %v", t, r*chunk(t)+k, g, want)
				}
			}
		}
	}
	// Accumulates: every rank adds (Sum) its values into every target's
	// elements [2, len-1), the windows having been reset.
	for i := range base {
		base[i] = value[T](0, me, i)
	}
	if err := win.Fence(); err != nil {
		return err
	}
	for i := range p {
		t := (me + i) % p
		src := make([]T, winLen(t, scale)-3)
		for k := range src {
			src[k] = value[T](1, me, k)
		}
		if err := win.Accumulate(src, t, 2, Sum); err != nil {
			return err
		}
	}
	if err := win.Fence(); err != nil {
		return err
	}
	for i := range base {
		want := value[T](0, me, i)
		if i >= 2 && i < len(base)-1 {
			for r := range p {
				want += value[T](1, r, i-2)
			}
		}
		if base[i] != want {
			return fmt.Errorf("after Accumulate: window[%d] = %v, want %v", i, base[i], want)
		}
	}
	return win.Free()
}

// TestWinFence: Put, Get and Accumulate between Fences, on 1-9 ranks, with
// windows of different odd lengths, small and large elements and
// transfers (the largest go by RDMA, or by one copy between the ranks'
// goroutines), over a reliable device and under faults.
func TestWinFence(t *testing.T) {
	for _, faults := range winFaults {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for n := 1; n <= 9; n++ {
				if faults != "" && n%2 == 0 && n > 2 {
					continue // the odd sizes suffice under faults
				}
				err := Run(n, func(c *Comm) error {
					if err := winFenceCase[int32](c, 10); err != nil {
						return fmt.Errorf("int32: %w", err)
					}
					if err := winFenceCase[celsius](c, 101); err != nil {
						return fmt.Errorf("celsius: %w", err)
					}
					if err := winFenceCase[complex128](c, 7); err != nil {
						return fmt.Errorf("complex128: %w", err)
					}
					if err := winFenceCase[uint8](c, 33); err != nil {
						return fmt.Errorf("uint8: %w", err)
					}
					if n <= 4 {
						// Chunks of 64 KiB and more: RDMA, one copy.
						if err := winFenceCase[float64](c, 40_001); err != nil {
							return fmt.Errorf("float64 large: %w", err)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

// winCounter has every rank increment the element at rank target's
// window[1] iters times, each a Get, Flush, Put under an exclusive lock:
// the count comes out exact only if the lock excludes.
func winCounter(c *Comm, target, iters int) error {
	base := make([]int64, 3)
	win, err := NewWin(c, base)
	if err != nil {
		return err
	}
	v := make([]int64, 1)
	for range iters {
		if err := win.Lock(target, true); err != nil {
			return err
		}
		if err := win.Get(v, target, 1); err != nil {
			return err
		}
		if err := win.Flush(target); err != nil {
			return err
		}
		v[0]++
		if err := win.Put(v, target, 1); err != nil {
			return err
		}
		if err := win.Unlock(target); err != nil {
			return err
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	if c.Rank() == target {
		if want := int64(c.Size() * iters); base[1] != want || base[0] != 0 || base[2] != 0 {
			return fmt.Errorf("window %v after %d ranks' %d locked increments each, want [0 %d 0]", base, c.Size(), iters, want)
		}
	}
	return win.Free()
}

// TestWinLockExclusive: every rank increments one counter in one rank's
// window by Get and Put under an exclusive lock; the count is exact. On
// 1-9 ranks, the counter at rank 0 and at the last rank, and under faults.
func TestWinLockExclusive(t *testing.T) {
	for _, faults := range winFaults {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for n := 1; n <= 9; n++ {
				iters := 40
				if faults != "" {
					iters = 15
				}
				err := Run(n, func(c *Comm) error {
					if err := winCounter(c, 0, iters); err != nil {
						return err
					}
					return winCounter(c, c.Size()-1, iters)
				})
				if err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

// winShared has every rank accumulate into every other rank's window under
// shared locks, while rank 0 also takes exclusive locks to read each
// window whole: an exclusive reader must see every rank's accumulate done
// or not done, never half (each rank adds 1 to all the elements it
// touches, in one Accumulate).
func winShared(c *Comm, iters int) error {
	p, me := c.Size(), c.Rank()
	const n = 301
	base := make([]float64, n)
	win, err := NewWin(c, base)
	if err != nil {
		return err
	}
	ones := make([]float64, n)
	for i := range ones {
		ones[i] = 1
	}
	seen := make([]float64, n)
	for it := range iters {
		for i := range p {
			t := (me + i) % p
			if err := win.Lock(t, false); err != nil {
				return err
			}
			if err := win.Accumulate(ones, t, 0, Sum); err != nil {
				return err
			}
			if err := win.Unlock(t); err != nil {
				return err
			}
		}
		if me == 0 {
			t := it % p
			if err := win.Lock(t, true); err != nil {
				return err
			}
			if err := win.Get(seen, t, 0); err != nil {
				return err
			}
			if err := win.Unlock(t); err != nil {
				return err
			}
			for i := range seen {
				if seen[i] != seen[0] {
					return fmt.Errorf("rank %d's window under an exclusive lock: element %d = %v, element 0 = %v", t, i, seen[i], seen[0])
				}
			}
		}
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	for i, v := range base {
		if want := float64(p * iters); v != want {
			return fmt.Errorf("window[%d] = %v after %d ranks' %d shared-lock accumulates, want %v", i, v, p, iters, want)
		}
	}
	return win.Free()
}

// TestWinLockShared: accumulates under shared locks from every rank into
// every rank, with exclusive readers among them.
func TestWinLockShared(t *testing.T) {
	for _, faults := range winFaults {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			for _, n := range []int{1, 2, 3, 5, 8} {
				if err := Run(n, func(c *Comm) error { return winShared(c, 12) }); err != nil {
					t.Fatalf("%d ranks: %v", n, err)
				}
			}
		})
	}
}

// TestWinPassiveIdleTarget: the target of passive-target epochs does not
// call mpi while the others Lock, Put, Accumulate, Get and Unlock: it
// blocks on a channel in one run and spins on an atomic in another. The
// origins must complete (the window's progress goroutine answers for the
// target), and the target then sees their data.
func TestWinPassiveIdleTarget(t *testing.T) {
	for _, faults := range winFaults {
		for _, idle := range []string{"channel", "spin"} {
			t.Run(fmt.Sprintf("faults=%q/%s", faults, idle), func(t *testing.T) {
				t.Setenv("WEFT_FAULTS", faults)
				for _, n := range []int{2, 4} {
					passiveIdle(t, n, idle)
				}
			})
		}
	}
}

func passiveIdle(t *testing.T, n int, idle string) {
	t.Helper()
	const size = 5000 // 40 KB: above the single-copy threshold between goroutines
	var (
		done     = make(chan struct{})
		finished atomic.Int32
	)
	err := Run(n, func(c *Comm) error {
		p, me := c.Size(), c.Rank()
		target := p - 1
		base := make([]int64, p*size)
		win, err := NewWin(c, base)
		if err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if me == target {
			// No mpi call until every origin has finished.
			if idle == "channel" {
				<-done
			} else {
				for finished.Load() < int32(p-1) {
					runtime.Gosched()
				}
			}
			for r := range p - 1 {
				for i := range size {
					if want := int64(r*size + i + 7); base[r*size+i] != want {
						return fmt.Errorf("target: window[%d] = %d, want %d", r*size+i, base[r*size+i], want)
					}
				}
			}
			return win.Free()
		}
		src := make([]int64, size)
		for i := range src {
			src[i] = int64(me*size + i)
		}
		seven := []int64{7}
		back := make([]int64, size)
		for _, excl := range []bool{true, false} {
			if err := win.Lock(target, excl); err != nil {
				return err
			}
			if excl {
				if err := win.Put(src, target, me*size); err != nil {
					return err
				}
				if err := win.Put(src[:3], target, me*size); err != nil { // small: a message, not a copy
					return err
				}
			} else {
				for i := range size {
					if err := win.Accumulate(seven, target, me*size+i, Sum); err != nil {
						return err
					}
					if i%500 == 499 {
						if err := win.Flush(target); err != nil {
							return err
						}
					}
				}
				if err := win.Get(back, target, me*size); err != nil {
					return err
				}
			}
			if err := win.Unlock(target); err != nil {
				return err
			}
		}
		for i, v := range back {
			if want := int64(me*size + i + 7); v != want {
				return fmt.Errorf("rank %d: Get after Unlock: element %d = %d, want %d", me, i, v, want)
			}
		}
		if finished.Add(1) == int32(p-1) {
			close(done)
		}
		return win.Free()
	})
	if err != nil {
		t.Fatalf("%d ranks, target %s: %v", n, idle, err)
	}
}

// TestWinErrors: a bad rank is ErrRank, a bad range, a call outside an
// epoch, a user op, Unlock or Flush without Lock, a second Lock, Fence
// while locked, and every call after Free are ErrArg; none changes either
// window.
func TestWinErrors(t *testing.T) {
	err := Run(3, func(c *Comm) error {
		me := c.Rank()
		base := make([]int32, winLen(me, 4)) // 5, 8, 11
		for i := range base {
			base[i] = int32(100*me + i)
		}
		win, err := NewWin(c, base)
		if err != nil {
			return err
		}
		src := []int32{-1, -2, -3}
		expect := func(what string, err, want error) error {
			if !errors.Is(err, want) {
				return fmt.Errorf("%s: got %v, want %v", what, err, want)
			}
			return nil
		}
		userOp := NewOp(func(inout, in []int32) {}, true)
		checks := []struct {
			what string
			err  error
			want error
		}{
			{"Put outside an epoch", win.Put(src, 1, 0), ErrArg},
			{"Flush without Lock", win.Flush(1), ErrArg},
			{"Unlock without Lock", win.Unlock(1), ErrArg},
		}
		if err := win.Fence(); err != nil {
			return err
		}
		checks = append(checks, []struct {
			what string
			err  error
			want error
		}{
			{"Put to rank -1", win.Put(src, -1, 0), ErrRank},
			{"Get from rank 3", win.Get(src, 3, 0), ErrRank},
			{"Accumulate at rank 3", win.Accumulate(src, 3, 0, Sum), ErrRank},
			{"Lock of rank 7", win.Lock(7, true), ErrRank},
			{"Put at -1", win.Put(src, 1, -1), ErrArg},
			{"Put past the end", win.Put(src, 0, 3), ErrArg}, // rank 0's window has 5
			{"Get past the end", win.Get(src, 2, 9), ErrArg},
			{"Accumulate past the end", win.Accumulate(src, 1, 6, Sum), ErrArg},
			{"Put at a huge displacement", win.Put(src, 1, 1<<62), ErrArg},
			{"Accumulate with a user op", win.Accumulate(src, 1, 0, userOp), ErrArg},
			{"Accumulate with an unknown op", win.Accumulate(src, 1, 0, Op(12)), ErrArg},
			{"Accumulate of MaxLoc on an odd count", win.Accumulate(src, 1, 0, MaxLoc), ErrArg},
		}...)
		// The refused calls changed nothing: the epoch has no operation
		// in it, so a Lock may start a passive one.
		if err := win.Lock((me+1)%c.Size(), false); err != nil {
			return fmt.Errorf("Lock after refused operations only: %v", err)
		}
		if err := win.Unlock((me + 1) % c.Size()); err != nil {
			return err
		}
		if err := win.Fence(); err != nil {
			return err
		}
		for i := range base {
			if want := int32(100*me + i); base[i] != want {
				return fmt.Errorf("a failed call changed window[%d] to %d", i, base[i])
			}
		}
		// Passive target.
		peer := (me + 1) % c.Size()
		if err := win.Lock(peer, false); err != nil {
			return err
		}
		checks = append(checks, []struct {
			what string
			err  error
			want error
		}{
			{"second Lock", win.Lock(peer, true), ErrArg},
			{"Put to a rank not locked", win.Put(src, (me+2)%c.Size(), 0), ErrArg},
			{"Fence while locked", win.Fence(), ErrArg},
			{"Free while locked", win.Free(), ErrArg},
		}...)
		if err := win.Unlock(peer); err != nil {
			return err
		}
		checks = append(checks, []struct {
			what string
			err  error
			want error
		}{{"Unlock twice", win.Unlock(peer), ErrArg}}...)
		// Operations in a Fence epoch, then a Lock: refused until Fence.
		if err := win.Fence(); err != nil {
			return err
		}
		if err := win.Put(src[:1], peer, 0); err != nil {
			return err
		}
		checks = append(checks, []struct {
			what string
			err  error
			want error
		}{{"Lock after a Put in a Fence epoch", win.Lock(peer, true), ErrArg}}...)
		if err := win.Fence(); err != nil {
			return err
		}
		if err := win.Free(); err != nil {
			return err
		}
		checks = append(checks, []struct {
			what string
			err  error
			want error
		}{
			{"Put after Free", win.Put(src, 1, 0), ErrArg},
			{"Get after Free", win.Get(src, 1, 0), ErrArg},
			{"Accumulate after Free", win.Accumulate(src, 1, 0, Sum), ErrArg},
			{"Fence after Free", win.Fence(), ErrArg},
			{"Lock after Free", win.Lock(1, true), ErrArg},
			{"Unlock after Free", win.Unlock(1), ErrArg},
			{"Flush after Free", win.Flush(1), ErrArg},
			{"Free after Free", win.Free(), ErrArg},
		}...)
		for _, ch := range checks {
			if err := expect(ch.what, ch.err, ch.want); err != nil {
				return err
			}
		}
		if base[0] != -1 && me != 0 { // the Put in the Fence epoch, from the rank before
			return fmt.Errorf("window[0] = %d after the previous rank's Put, want -1", base[0])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWinAccumulateOrder: Accumulates from one origin to overlapping
// elements apply in the order issued, as MPI orders them by default,
// also where the device loses and reorders packets (lapi places them in
// any order): Sum then Prod is (1+1)*3, never 1*3+1; on a run, on part of
// it, and after a large Sum (many packets, by half-RDMA accumulate).
func TestWinAccumulateOrder(t *testing.T) {
	for _, faults := range winFaults {
		t.Run(fmt.Sprintf("faults=%q", faults), func(t *testing.T) {
			t.Setenv("WEFT_FAULTS", faults)
			err := Run(2, func(c *Comm) error {
				const big = 1 << 18 // 2 MiB of int64
				base := make([]int64, big)
				win, err := NewWin(c, base)
				if err != nil {
					return err
				}
				ones, threes := make([]int64, big), make([]int64, 2)
				for i := range ones {
					ones[i] = 1
				}
				threes[0], threes[1] = 3, 3
				for round := range 60 {
					if c.Rank() == 1 {
						clear(base[:8])
						base[0], base[1], base[2], base[3] = 1, 1, 1, 1
					}
					if err := win.Fence(); err != nil {
						return err
					}
					n := 4
					if round%10 == 9 {
						n = big
					}
					if c.Rank() == 0 {
						if err := win.Accumulate(ones[:n], 1, 0, Sum); err != nil {
							return err
						}
						if err := win.Accumulate(threes, 1, 1, Prod); err != nil {
							return err
						}
					}
					if err := win.Fence(); err != nil {
						return err
					}
					if c.Rank() == 1 && (base[0] != 2 || base[1] != 6 || base[2] != 6 || base[3] != 2) {
						return fmt.Errorf("round %d (Sum of %d): window %v, want [2 6 6 2]: the Prod overtook the Sum", round, n, base[:4])
					}
				}
				return win.Free()
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWinLockHeldByFailedRank: rank 2 takes rank 0's lock and fails
// holding it. Rank 1, knowing of the failure, then locks rank 0: it fails
// with ErrPeerFailed naming rank 2, where it used to retry until the
// timeout (none here would end it within the test's).
func TestWinLockHeldByFailedRank(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	var lockErr error
	err := Run(3, func(c *Comm) error {
		win, err := NewWin(c, make([]int64, 4))
		if err != nil {
			return err
		}
		switch c.Rank() {
		case 2:
			if err := win.Lock(0, true); err != nil {
				return err
			}
			if err := Send(c, []byte{1}, 1, 0); err != nil {
				return err
			}
			if _, err := Recv(c, make([]byte, 1), 1, 2); err != nil {
				return err
			}
			return errors.New("rank 2 fails holding rank 0's lock")
		case 1:
			if _, err := Recv(c, make([]byte, 1), 2, 0); err != nil {
				return err
			}
			if err := Send(c, []byte{1}, 2, 2); err != nil {
				return err
			}
			if _, err := Recv(c, make([]byte, 1), 2, 1); !errors.Is(err, ErrPeerFailed) {
				return fmt.Errorf("receive from the failed rank 2: %v, want ErrPeerFailed", err)
			}
			start := time.Now()
			lockErr = win.Lock(0, false)
			if time.Since(start) > 10*time.Second {
				return fmt.Errorf("Lock took %v", time.Since(start))
			}
			return Send(c, []byte{1}, 0, 0)
		case 0: // the target, alive until rank 1 is done
			_, err := Recv(c, make([]byte, 1), 1, 0)
			return err
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "rank 2 fails") {
		t.Errorf("Run: %v, want rank 2's error", err)
	}
	if !errors.Is(lockErr, ErrPeerFailed) || !strings.Contains(lockErr.Error(), "rank 2") {
		t.Errorf("rank 1's Lock of rank 0, held by the failed rank 2: %v, want ErrPeerFailed naming rank 2", lockErr)
	}
}

// TestWinLockOfFailedTarget: rank 1 holds rank 2's lock when rank 2
// fails. Unlock fails with ErrPeerFailed and ends the epoch: Free then
// fails with the failure too, not with ErrArg for a lock still held.
func TestWinLockOfFailedTarget(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	var unlockErr, freeErr error
	err := Run(3, func(c *Comm) error {
		win, err := NewWin(c, make([]int64, 4))
		if err != nil {
			return err
		}
		switch c.Rank() {
		case 1:
			if err := win.Lock(2, true); err != nil {
				return err
			}
			if err := win.Put([]int64{7}, 2, 0); err != nil {
				return err
			}
			if err := Send(c, []byte{1}, 2, 0); err != nil {
				return err
			}
			if _, err := Recv(c, make([]byte, 1), 2, 1); !errors.Is(err, ErrPeerFailed) {
				return fmt.Errorf("receive from the failed rank 2: %v, want ErrPeerFailed", err)
			}
			unlockErr = win.Unlock(2)
			freeErr = win.Free()
		case 2:
			if _, err := Recv(c, make([]byte, 1), 1, 0); err != nil {
				return err
			}
			return errors.New("rank 2 fails while rank 1 holds its lock")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "rank 2 fails") {
		t.Errorf("Run: %v, want rank 2's error", err)
	}
	if !errors.Is(unlockErr, ErrPeerFailed) {
		t.Errorf("Unlock of the failed rank 2: %v, want ErrPeerFailed", unlockErr)
	}
	if !errors.Is(freeErr, ErrPeerFailed) || errors.Is(freeErr, ErrArg) {
		t.Errorf("Free after that: %v, want ErrPeerFailed (not ErrArg)", freeErr)
	}
}

// TestWinMismatchedSync: ranks that call Fence and Free on one window,
// or Fence on two different windows, fail with ErrArg at every rank
// instead of pairing up (the Put that followed into the freed window
// returned nil); the windows stay usable where they were not freed.
func TestWinMismatchedSync(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		a, err := NewWin(c, make([]int32, 4))
		if err != nil {
			return err
		}
		b, err := NewWin(c, make([]int32, 4))
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			err = a.Fence()
		} else {
			err = a.Free()
		}
		if !errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "disagree") {
			return fmt.Errorf("Fence against Free: %v, want ErrArg saying the ranks disagree", err)
		}
		w := a
		if c.Rank() == 1 {
			w = b
		}
		if err := w.Fence(); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Fence on different windows: %v, want ErrArg", err)
		}
		for _, w := range []*Win[int32]{a, b} {
			if err := w.Fence(); err != nil {
				return fmt.Errorf("Fence agreed on afterwards: %v", err)
			}
			if err := w.Free(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWinMismatchedElements: ranks that make a window of different element
// types fail with ErrArg, all of them: of different sizes, and of one size
// (int64 and float64, whose Accumulate would add an integer's bits to a
// float's).
func TestWinMismatchedElements(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		var err, err2 error
		if c.Rank() == 0 {
			_, err = NewWin(c, make([]int32, 4))
			_, err2 = NewWin(c, make([]int64, 4))
		} else {
			_, err = NewWin(c, make([]int64, 4))
			_, err2 = NewWin(c, make([]float64, 4))
		}
		if !errors.Is(err, ErrArg) {
			return fmt.Errorf("NewWin of int32 and int64 elements: %v, want ErrArg", err)
		}
		if !errors.Is(err2, ErrArg) || !strings.Contains(err2.Error(), "int64") || !strings.Contains(err2.Error(), "float64") {
			return fmt.Errorf("NewWin of int64 and float64 elements: %v, want ErrArg naming both", err2)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWinEmpty: a rank may expose an empty window; operations of no
// elements anywhere are allowed, any other toward it fails with ErrArg.
func TestWinEmpty(t *testing.T) {
	err := Run(2, func(c *Comm) error {
		var base []float32
		if c.Rank() == 1 {
			base = make([]float32, 2)
		}
		win, err := NewWin(c, base)
		if err != nil {
			return err
		}
		if err := win.Fence(); err != nil {
			return err
		}
		if err := win.Put(nil, 0, 0); err != nil {
			return fmt.Errorf("empty Put to an empty window: %v", err)
		}
		if err := win.Put([]float32{1}, 0, 0); !errors.Is(err, ErrArg) {
			return fmt.Errorf("Put to an empty window: %v, want ErrArg", err)
		}
		// Each rank its own element of rank 1's window: two Puts to one
		// place in one epoch are erroneous in MPI (and a data race here,
		// rank 1's own Put being a copy while rank 0's lands beside it).
		if err := win.Put([]float32{float32(c.Rank() + 1)}, 1, c.Rank()); err != nil {
			return err
		}
		if err := win.Fence(); err != nil {
			return err
		}
		if c.Rank() == 1 && (base[0] != 1 || base[1] != 2) {
			return fmt.Errorf("window %v, want [1 2]", base)
		}
		return win.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWinManyWindows: windows made and freed one after another, and
// several at once, on one communicator and on a Dup; counters are reused
// and the progress goroutine stops with the last window.
func TestWinManyWindows(t *testing.T) {
	err := Run(3, func(c *Comm) error {
		d, err := c.Dup()
		if err != nil {
			return err
		}
		for it := range 20 {
			a := make([]int16, 4)
			b := make([]int16, 4)
			wa, err := NewWin(c, a)
			if err != nil {
				return err
			}
			wb, err := NewWin(d, b)
			if err != nil {
				return err
			}
			t := (c.Rank() + 1) % 3
			if err := wa.Lock(t, false); err != nil {
				return err
			}
			if err := wb.Lock(t, true); err != nil {
				return err
			}
			if err := wa.Accumulate([]int16{1}, t, it%4, Sum); err != nil {
				return err
			}
			if err := wb.Put([]int16{int16(it)}, t, 3); err != nil {
				return err
			}
			if err := wb.Unlock(t); err != nil {
				return err
			}
			if err := wa.Unlock(t); err != nil {
				return err
			}
			if err := c.Barrier(); err != nil {
				return err
			}
			if a[it%4] != 1 || b[3] != int16(it) {
				return fmt.Errorf("iteration %d: windows %v %v", it, a, b)
			}
			if err := wb.Free(); err != nil {
				return err
			}
			if err := wa.Free(); err != nil {
				return err
			}
		}
		w := c.World()
		w.win.mu.Lock()
		open, spare := w.win.open, len(w.win.spare)
		w.win.mu.Unlock()
		if open != 0 || spare > 6 {
			return fmt.Errorf("after the windows: %d open, %d spare counters", open, spare)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// udpWorlds opens n worlds over UDP devices on the loopback interface in
// this process, closed when the test ends.
func udpWorlds(tb testing.TB, n int) []*World {
	tb.Helper()
	key := uint64(time.Now().UnixNano())
	devs := make([]*udp.Device, n)
	for r := range n {
		d, err := udp.Open(hal.Config{JobKey: key, Rank: lapi.Rank(r), Size: n}, udp.Options{})
		if err != nil {
			tb.Skipf("udp device unavailable: %v", err)
		}
		devs[r] = d
	}
	worlds := make([]*World, n)
	var lcs []*lapi.Context
	tb.Cleanup(func() {
		for _, lc := range lcs {
			lc.Close()
		}
	})
	for r, d := range devs {
		for p, q := range devs {
			if err := d.Connect(lapi.Rank(p), q.Addr()); err != nil {
				tb.Fatal(err)
			}
		}
		lc, err := lapi.Open(lapi.Config{Device: d, Rank: lapi.Rank(r), Size: n, JobKey: key})
		if err != nil {
			tb.Fatal(err)
		}
		lcs = append(lcs, lc)
		if worlds[r], err = newWorld(lc, envOptions(tb), nil); err != nil {
			tb.Fatal(err)
		}
	}
	return worlds
}

// TestWinDevices: the fence, lock and idle-target cases over the
// shared-memory device (cross-memory attach for the large transfers where
// it is allowed) and over UDP on the loopback, each rank a world of its
// own as in separate processes.
func TestWinDevices(t *testing.T) {
	for _, dev := range []string{"shm", "udp"} {
		t.Run(dev, func(t *testing.T) {
			const n = 3
			worlds := devWorlds(t, dev, n)
			var (
				mu       sync.Mutex
				idleDone = make(chan struct{})
				waiting  = n - 1
			)
			err := runWorlds(worlds, func(c *Comm) error {
				if err := winFenceCase[float64](c, 30_001); err != nil {
					return err
				}
				if err := winFenceCase[int8](c, 17); err != nil {
					return err
				}
				if err := winCounter(c, 1, 20); err != nil {
					return err
				}
				if err := winShared(c, 5); err != nil {
					return err
				}
				// Rank 0 leaves mpi alone while the others lock it.
				base := make([]int32, 2*n)
				win, err := NewWin(c, base)
				if err != nil {
					return err
				}
				if err := c.Barrier(); err != nil {
					return err
				}
				if c.Rank() == 0 {
					<-idleDone
				} else {
					for range 10 {
						if err := win.Lock(0, true); err != nil {
							return err
						}
						if err := win.Accumulate([]int32{1, 2}, 0, 2*c.Rank(), Sum); err != nil {
							return err
						}
						if err := win.Unlock(0); err != nil {
							return err
						}
					}
					mu.Lock()
					if waiting--; waiting == 0 {
						close(idleDone)
					}
					mu.Unlock()
				}
				if err := win.Free(); err != nil {
					return err
				}
				if c.Rank() == 0 {
					for r := 1; r < n; r++ {
						if base[2*r] != 10 || base[2*r+1] != 20 {
							return fmt.Errorf("idle target's window %v", base)
						}
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

// TestWinProcesses runs testdata/winprocs, windows across processes, under
// gorun on 3 ranks over the shared-memory device (cross-memory attach for
// the large transfers, where it is allowed) and over UDP: Fence epochs,
// an exclusive-lock counter, and a target that spins on its own window's
// memory without calling mpi while the others lock it.
func TestWinProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gorun jobs")
	}
	dir := t.TempDir()
	gorun, prog := filepath.Join(dir, "gorun"), filepath.Join(dir, "winprocs")
	for bin, pkg := range map[string]string{gorun: "../cmd/gorun", prog: "./testdata/winprocs"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	for _, transport := range []string{"shm", "udp"} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, gorun, "-n", "3", "--transport", transport, prog).CombinedOutput()
			if err != nil {
				t.Fatalf("gorun -n 3 --transport %s winprocs: %v\n%s", transport, err, out)
			}
		})
	}
}
