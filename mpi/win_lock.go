package mpi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/lapi"
)

// Passive-target locks (MPI_Win_lock, MPI_Win_unlock). Each rank's window
// has a lock word, an int64 in a block registered for read-modify-write,
// which origins change with lapi's Rmw; the target's own goroutine plays
// no part (its progress engine applies the Rmw, see winProgress):
//
//   - 0: unlocked;
//   - s > 0: s shared holders;
//   - lockExclusiveMark + s (negative): one exclusive holder, and s shared
//     attempts not yet backed out.
//
// Exclusive: compare-and-swap 0 → lockExclusiveMark, retried with back-off
// until it finds 0; released by adding -lockExclusiveMark. Shared:
// fetch-and-add 1, which holds the lock if the word was not negative, else
// is backed out (add -1) and retried; released by adding -1. Because an
// exclusive holder's mark is far below zero, shared attempts in flight
// never bring the word back to 0 while it holds the lock, and adding (not
// storing) on release keeps their increments counted.
//
// Unlock sends the release once the epoch's operations are complete and
// returns without waiting for its answer: a round trip less per epoch.
// Every change to the word is an addition or a compare-and-swap, so a
// later attempt of this rank's that overtakes the release (lapi keeps no
// order) is harmless: a shared one counts itself either way, an exclusive
// one fails and is retried once the release is answered, at once.

// Lock kinds held by an origin (Win.locked).
const (
	lockNone uint8 = iota
	lockShared
	lockExclusive
)

// lockExclusiveMark is the exclusive holder's value: far enough below 0
// that no number of shared attempts in flight brings it back.
const lockExclusiveMark = -1 << 40

// Back-off between attempts at a lock held by another rank: from
// lockBackoffMin, doubling to lockBackoffMax. The origin makes progress
// meanwhile (it may be the target of other ranks' operations, the holder's
// release among them).
const (
	lockBackoffMin = 2 * time.Microsecond
	lockBackoffMax = time.Millisecond
)

// Lock opens a passive-target epoch toward target (MPI_Win_lock): it
// returns once this rank holds target's lock, shared or exclusive. An
// exclusive lock excludes every other lock on target; shared ones exclude
// exclusive ones only. target need not call mpi meanwhile. Locking a
// target this rank has locked already, or locking during an active-target
// epoch in which operations were issued since the last Fence, fails with
// ErrArg.
func (win *Win[T]) Lock(target int, exclusive bool) error {
	if err := win.usable("lock"); err != nil {
		return err
	}
	if err := win.checkRank("lock", target); err != nil {
		return err
	}
	if win.locked[target] != lockNone {
		return fmt.Errorf("mpi: window lock of rank %d: this rank holds its lock already: %w", target, ErrArg)
	}
	if win.fence {
		if win.fenceOps {
			return fmt.Errorf("mpi: window lock of rank %d during an active-target epoch with operations issued (end it with Fence first): %w",
				target, ErrArg)
		}
		win.fence = false // the Fence's epoch ends with no operation in it
	}
	ctx, cancel := win.c.w.deadline(context.Background())
	defer cancel()
	backoff := lockBackoffMin
	for {
		releasing := win.relPend > 0
		ok, err := win.tryLock(ctx, target, exclusive)
		if err != nil {
			return win.lockErr(ctx, "lock", target, err)
		}
		if ok {
			break
		}
		if err := win.failedMember(); err != nil {
			return win.lockErr(ctx, "lock", target, err)
		}
		if releasing {
			// The attempt may have overtaken this rank's own release:
			// once that is answered, try again at once.
			if err := win.released(); err != nil {
				return win.lockErr(ctx, "lock", target, err)
			}
			continue
		}
		if err := win.pause(ctx, backoff); err != nil {
			return win.lockErr(ctx, "lock", target, err)
		}
		backoff = min(2*backoff, lockBackoffMax)
	}
	win.locked[target] = lockShared
	if exclusive {
		win.locked[target] = lockExclusive
	}
	win.nlocked++
	return nil
}

// Unlock ends the passive-target epoch toward target (MPI_Win_unlock):
// the operations issued toward it are complete (in its window, or in the
// origin buffers of Gets), then the release of the lock is sent, which
// Unlock does not wait for (this rank's next Lock or Free does, where it
// matters). Unlocking a target this rank has not locked fails with ErrArg.
func (win *Win[T]) Unlock(target int) error {
	if err := win.usable("unlock"); err != nil {
		return err
	}
	if err := win.checkRank("unlock", target); err != nil {
		return err
	}
	kind := win.locked[target]
	if kind == lockNone {
		return fmt.Errorf("mpi: window unlock of rank %d, which this rank has not locked: %w", target, ErrArg)
	}
	if err := win.complete(target); err != nil {
		return win.unlockFailed(target, err)
	}
	release := int64(-1)
	if kind == lockExclusive {
		release = -lockExclusiveMark
	}
	if target == win.c.rank {
		atomic.AddInt64(&win.lockw[0], release)
	} else {
		p := &win.peers[target]
		if err := win.lc.Rmw(p.rank, lapi.FetchAndAdd, p.lock, release, 0, nil, lapi.SendOpts{Origin: win.rel}); err != nil {
			return win.unlockFailed(target, err)
		}
		win.relPend++
	}
	win.locked[target] = lockNone
	win.nlocked--
	return nil
}

// unlockFailed is Unlock's error. If the target failed, its lock is gone
// with it, and the epoch ends here, with the failure (Free may follow).
func (win *Win[T]) unlockFailed(target int, err error) error {
	if win.lc.PeerErr(win.peers[target].rank) != nil {
		win.locked[target] = lockNone
		win.nlocked--
	}
	return fmt.Errorf("mpi: window unlock of rank %d: %w", target, err)
}

// tryLock makes one attempt at target's lock and reports whether it
// holds it now.
func (win *Win[T]) tryLock(ctx context.Context, target int, exclusive bool) (bool, error) {
	if exclusive {
		old, err := win.rmwAt(ctx, target, lapi.CompareAndSwap, lockExclusiveMark, 0)
		return err == nil && old == 0, err
	}
	old, err := win.rmwAt(ctx, target, lapi.FetchAndAdd, 1, 0)
	if err != nil || old >= 0 {
		return err == nil, err
	}
	_, err = win.rmwAt(ctx, target, lapi.FetchAndAdd, -1, 0) // an exclusive holder has it: back out
	return false, err
}

// rmwAt applies op to target's lock word and returns its previous value.
// This rank's own word is changed in place, with the same atomic
// instructions the progress engine applies other ranks' Rmws with.
func (win *Win[T]) rmwAt(ctx context.Context, target int, op lapi.RmwOp, operand, compare int64) (int64, error) {
	if target == win.c.rank {
		p := &win.lockw[0]
		switch op {
		case lapi.CompareAndSwap:
			for {
				old := atomic.LoadInt64(p)
				if old != compare || atomic.CompareAndSwapInt64(p, compare, operand) {
					return old, nil
				}
			}
		case lapi.FetchAndAdd:
			return atomic.AddInt64(p, operand) - operand, nil
		}
		return 0, fmt.Errorf("mpi: window lock: rmw %d", op)
	}
	p := &win.peers[target]
	if err := win.lc.Rmw(p.rank, op, p.lock, operand, compare, win.prev, lapi.SendOpts{Origin: win.rmw}); err != nil {
		return 0, err
	}
	if err := win.rmw.Wait(ctx, 1); err != nil {
		// This one failed, or owes a reply still: a late reply must
		// count, and write, nowhere the next attempt reads (an old value
		// of 0 landing there would let an exclusive attempt believe it
		// holds a lock another rank holds).
		win.rmw, win.prev = win.c.w.win.counter(win.lc), new(int64)
		return 0, err
	}
	return *win.prev, nil
}

// released waits until every release this rank sent is answered (applied
// at its target).
func (win *Win[T]) released() error {
	n := win.relPend
	if n == 0 {
		return nil
	}
	ctx, cancel := win.c.w.deadline(context.Background())
	defer cancel()
	win.relPend = 0
	if err := win.rel.Wait(ctx, n); err != nil {
		win.rel = win.c.w.win.counter(win.lc) // this one failed, or owes answers still
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%w)", &TimeoutError{Rank: win.c.w.rank,
				Waiting: fmt.Sprintf("%d window lock releases to be answered", n)}, ctx.Err())
		}
		return err
	}
	return nil
}

// pause makes progress for d: the lock's holder may be waiting for this
// rank, and its release may be among what comes in.
func (win *Win[T]) pause(ctx context.Context, d time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := win.lc.Wait(pctx, func() (bool, error) { return false, nil })
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil
	}
	return err
}

// failedMember is the failure of a rank of the window's group, or nil. A
// lock word does not say who holds it, and a failed holder never
// releases it: an attempt that finds the lock held fails once any rank
// of the group has, instead of retrying for ever.
func (win *Win[T]) failedMember() error {
	for q, r := range win.c.group {
		if err := win.lc.PeerErr(lapi.Rank(r)); err != nil {
			return fmt.Errorf("the lock is held, and rank %d of the window failed (it may be the holder): %w", q, err)
		}
	}
	return nil
}

// lockErr names a failed lock or unlock of target; a timeout says what the
// rank was waiting for.
func (win *Win[T]) lockErr(ctx context.Context, op string, target int, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("mpi: window %s: %w (%w)", op, &TimeoutError{Rank: win.c.w.rank,
			Waiting: fmt.Sprintf("the window lock of rank %d", win.c.group[target])}, ctx.Err())
	}
	return fmt.Errorf("mpi: window %s of rank %d: %w", op, target, err)
}

// lockedRanks lists the ranks this rank holds locks on, for errors.
func (win *Win[T]) lockedRanks() string {
	var b strings.Builder
	for t, k := range win.locked {
		if k != lockNone {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "rank %d", t)
		}
	}
	return b.String()
}
