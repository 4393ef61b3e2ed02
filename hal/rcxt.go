package hal

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
)

// RCxt is an RDMA context at the origin: one transfer's identity. Its ID
// and key name the transfer at the target (with the origin's rank), and
// its tid says which drive of it a packet belongs to. A context's tids only
// grow, across every transfer it carries in this process's life, so a
// target can tell an abandoned drive's late packets (a lower tid) from the
// current one's.
type RCxt struct {
	ID     uint32
	Key    uint32
	Window uint8 // the owner: the window (device) it was allocated for
	tid    uint32
	base   uint32
	inUse  bool
}

// Tid is the context's current drive.
func (r *RCxt) Tid() uint32 { return r.tid }

// Base is the tid of the current transfer's first drive.
func (r *RCxt) Base() uint32 { return r.base }

// Begin starts a new transfer on the context and returns its tid: fresh,
// and larger than any the context used before.
func (r *RCxt) Begin() uint32 {
	r.tid++
	r.base = r.tid
	return r.tid
}

// Redrive starts another drive of the current transfer (its packets or
// its completion were lost) and returns the new tid: the target ignores
// what is still in flight from earlier drives, but keeps what they placed.
func (r *RCxt) Redrive() uint32 {
	r.tid++
	return r.tid
}

// Current reports whether a completion carrying key and tid answers this
// context's current drive; completions of earlier drives are stale.
func (r *RCxt) Current(key, tid uint32) bool { return r.inUse && key == r.Key && tid == r.tid }

// Completes reports whether a completion carrying key, base and tid ends
// this context's current transfer: a completion is sent only once every
// byte is placed, so one answering an earlier drive of the same transfer
// (its base, and its key: a context is re-keyed for each transfer) ends
// it as well as the current drive's would. A report of missing segments
// answers only the current drive (Current).
func (r *RCxt) Completes(key, base, tid uint32) bool {
	return r.inUse && key == r.Key && base == r.base && int32(tid-base) >= 0 && int32(r.tid-tid) >= 0
}

// RCxtPool is a window's pool of RDMA contexts. Not safe for concurrent
// use: the driver's progress lock guards it.
type RCxtPool struct {
	cxts   []*RCxt // by ID; pointers, so contexts never move
	free   []uint32
	window uint8
	limit  int
	key    uint32
}

// NewRCxtPool makes a pool of at most limit contexts (at most MaxRCxt)
// owned by window. Keys start from a random seed, so a restarted process's
// contexts do not answer to its earlier life's completions.
func NewRCxtPool(limit int, window uint8) *RCxtPool {
	if limit <= 0 || limit > MaxRCxt {
		limit = MaxRCxt
	}
	var b [4]byte
	_, _ = crand.Read(b[:])
	return &RCxtPool{window: window, limit: limit, key: binary.LittleEndian.Uint32(b[:]) | 1}
}

// Alloc takes a context. An exhausted pool returns ErrNoResource: retry
// once a transfer has completed.
func (p *RCxtPool) Alloc() (*RCxt, error) {
	var r *RCxt
	if n := len(p.free); n > 0 {
		r = p.cxts[p.free[n-1]]
		p.free = p.free[:n-1]
	} else {
		if len(p.cxts) >= p.limit {
			return nil, fmt.Errorf("hal: all %d rCxts in use: %w", p.limit, ErrNoResource)
		}
		r = &RCxt{ID: uint32(len(p.cxts))}
		p.cxts = append(p.cxts, r)
	}
	p.key += 0x9e3779b9 // golden-ratio step: a reused context's key changes
	if p.key == 0 {
		p.key = 1
	}
	r.Key, r.Window, r.inUse = p.key, p.window, true
	return r, nil
}

// Free returns r to the pool. Its tid is kept: the next transfer on it
// continues the sequence.
func (p *RCxtPool) Free(r *RCxt) {
	if r == nil || !r.inUse || int(r.ID) >= len(p.cxts) || p.cxts[r.ID] != r {
		return
	}
	r.inUse = false
	p.free = append(p.free, r.ID)
}

// InUse is the number of contexts allocated.
func (p *RCxtPool) InUse() int { return len(p.cxts) - len(p.free) }
