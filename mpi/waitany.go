package mpi

import (
	"context"
	"fmt"
)

// pending reports whether q names an operation that has not completed
// (false for nil, and for a request a Wait or Test has settled).
func (q *Request) pending() bool {
	return q != nil && q.op != nil && !q.op.done.Load()
}

// WaitAny blocks until one of reqs completes and returns its index, status
// and error (MPI_Waitany). A request that has completed already counts
// (it reports its result again, as to Wait), so a program that waits for
// every request in turn sets reqs[index] to nil after each. nil requests
// are skipped; when every request is nil WaitAny returns index -1 at once,
// as MPI_Waitany returns MPI_UNDEFINED. The requests must be of one rank.
func WaitAny(reqs ...*Request) (index int, st Status, err error) {
	ready := func() int {
		for i, q := range reqs {
			if q != nil && !q.pending() {
				return i
			}
		}
		return -1
	}
	var w *World
	first := -1 // the first pending request, for reports
	for i, q := range reqs {
		if !q.pending() {
			continue
		}
		if first < 0 {
			first, w = i, q.op.w
		} else if q.op.w != w {
			return -1, Status{}, fmt.Errorf("mpi: WaitAny: requests %d and %d are of different ranks: %w", first, i, ErrArg)
		}
	}
	i := ready()
	if i < 0 && w != nil {
		ctx, cancel := w.deadline(context.Background())
		defer cancel()
		note := reqs[first].op.note()
		note.op = fmt.Sprintf("WaitAny of %d requests, the first a %s", len(reqs), note.op)
		reported := false
		err := w.lc.WaitReport(ctx, func() (bool, error) {
			i = ready()
			return i >= 0, nil
		}, func() {
			w.waiting.Store(note)
			reported = true
			for _, q := range reqs {
				if q.pending() && q.op.sched != nil {
					q.op.sched.watch() // as Wait has its call watched
					break
				}
			}
		})
		if reported {
			w.waiting.Store(nil)
		}
		if err != nil {
			if ctx.Err() != nil {
				w.snapTimeout(reqs[first].op) // the first timeout writes a state snapshot
				err = fmt.Errorf("%w (%w)", &TimeoutError{Rank: w.rank, Waiting: note.describe()}, ctx.Err())
			}
			return -1, Status{}, err
		}
	}
	if i < 0 {
		return -1, Status{}, nil
	}
	st, err = reqs[i].Wait()
	return i, st, err
}

// TestAll makes progress once and reports whether every request has
// completed (MPI_Testall); nil requests and those completed before count
// as done. Only when all have does it settle them, as Wait does, and
// return the first error among them; otherwise it changes none.
func TestAll(reqs ...*Request) (done bool, err error) {
	var w *World
	for _, q := range reqs {
		if q.pending() && q.op.sched != nil {
			q.op.sched.tryAdvance()
			q.op.sched.watch()
		}
	}
	for _, q := range reqs {
		if q.pending() && q.op.w != w {
			w = q.op.w
			w.lc.Progress()
		}
	}
	for _, q := range reqs {
		if q.pending() {
			return false, nil
		}
	}
	var first error
	for _, q := range reqs {
		if _, _, err := q.Test(); err != nil && first == nil {
			first = err
		}
	}
	return true, first
}

// TestAny makes progress once and reports the first of reqs that has
// completed (MPI_Testany), settled as by Test: its index, its status and
// error. done is false, and index -1, when none has; when every request
// is nil, done is true and index -1, as MPI_Testany's MPI_UNDEFINED.
func TestAny(reqs ...*Request) (index int, done bool, st Status, err error) {
	live := false
	for _, q := range reqs {
		if q != nil {
			live = true
			if q.pending() {
				q.op.progress()
				break
			}
		}
	}
	if !live {
		return -1, true, Status{}, nil
	}
	for i, q := range reqs {
		if q != nil && !q.pending() {
			st, err = q.Wait()
			return i, true, st, err
		}
	}
	return -1, false, Status{}, nil
}

// WaitSome blocks until at least one of reqs has completed, then settles
// every one that has (MPI_Waitsome) and returns their indices, statuses
// and errors, in the order of reqs. A request that completed before
// counts, so a program sets the entries it has seen to nil; when every
// request is nil it returns no index at once. When the wait itself fails
// (WEFT_TIMEOUT, or requests of different ranks), it returns every request
// still pending with that error, unsettled: never the empty answer that
// means there is nothing left to wait for.
func WaitSome(reqs ...*Request) (indices []int, sts []Status, errs []error) {
	i, _, err := WaitAny(reqs...)
	if i < 0 && err != nil {
		for j, q := range reqs {
			if q.pending() {
				indices, sts, errs = append(indices, j), append(sts, Status{}), append(errs, err)
			}
		}
		return indices, sts, errs
	}
	if i < 0 {
		return nil, nil, nil
	}
	for j, q := range reqs {
		if q != nil && !q.pending() {
			st, err := q.Wait()
			indices, sts, errs = append(indices, j), append(sts, st), append(errs, err)
		}
	}
	return indices, sts, errs
}
