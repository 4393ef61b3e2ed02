package lapi

import (
	"fmt"
	"sync"

	"github.com/weft-hpc/weft/hal"
)

// collectives runs a context's broadcasts (bcast.go) and multicasts
// (mcast.go) by RDMA; their state is in their handlers' tables.
type collectives struct {
	c       *Context
	started *sync.Cond // on c.mu: a pulling receiver's read start returned (bcastState.starting)
}

// startedCond is co.started, made on first use (c.mu held).
func (co *collectives) startedCond() *sync.Cond {
	if co.started == nil {
		co.started = sync.NewCond(&co.c.mu)
	}
	return co.started
}

// groupIndex checks the group and root of a collective (op in errors):
// ranks of this job, none twice, this rank among them, root an index of
// group. It returns this rank's index in group.
func (co *collectives) groupIndex(op string, group []hal.Rank, root int) (int, error) {
	c := co.c
	me := -1
	seen := make([]bool, c.cfg.Size)
	for i, r := range group {
		switch {
		case int(r) >= c.cfg.Size:
			return -1, fmt.Errorf("lapi: %s to rank %d of %d: %w", op, r, c.cfg.Size, ErrBadRank)
		case seen[r]:
			return -1, fmt.Errorf("lapi: %s: rank %d twice in the group: %w", op, r, ErrBcast)
		case r == c.rank:
			me = i
		}
		seen[r] = true
	}
	switch {
	case me < 0:
		return -1, fmt.Errorf("lapi: %s: rank %d is not in the group: %w", op, c.rank, ErrBcast)
	case root < 0 || root >= len(group):
		return -1, fmt.Errorf("lapi: %s: root %d of a group of %d: %w", op, root, len(group), ErrBcast)
	}
	return me, nil
}

// ownCounters checks that each counter given to a collective (op in
// errors) is nil or this context's.
func (co *collectives) ownCounters(op string, ks ...*Counter) error {
	c := co.c
	for _, k := range ks {
		if k != nil && k.c != c {
			return fmt.Errorf("lapi: %s: a counter is not this context's: %w", op, ErrBcast)
		}
	}
	return nil
}

// failCallerLocked tells a collective's caller it failed with err: each
// of its counters (nil ones aside) fails and fires, and n hears (c.mu
// held).
func (co *collectives) failCallerLocked(err error, n Completer, ks ...*Counter) {
	c := co.c
	for _, k := range ks {
		if k != nil {
			k.fail(err)
			k.incr()
		}
	}
	c.am.note(n, err)
}

// endedIDs remembers the ids of the last endedMax collectives whose part
// here failed or was aborted, so that their peers' late messages are
// dropped rather than kept for a call that will not come (guarded by
// c.mu). A call with the id takes it out.
type endedIDs struct {
	seq  map[uint64]uint64 // id: when it was added
	ring []uint64          // the ids by when they were added, the oldest at next
	next uint64            // how many were added
}

// endedMax bounds endedIDs.
const endedMax = 1024

func (e *endedIDs) add(id uint64) {
	if e.seq == nil {
		e.seq, e.ring = make(map[uint64]uint64), make([]uint64, endedMax)
	}
	i := e.next % endedMax
	if old := e.ring[i]; e.next >= endedMax && e.seq[old] == e.next-endedMax {
		delete(e.seq, old) // the oldest, not added again since
	}
	e.ring[i] = id
	e.seq[id] = e.next
	e.next++
}

func (e *endedIDs) has(id uint64) bool {
	_, ok := e.seq[id]
	return ok
}

func (e *endedIDs) remove(id uint64) { delete(e.seq, id) }
