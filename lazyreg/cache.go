package lazyreg

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"
)

// Cache is a registration cache over one Registrar. Transfers Acquire the
// memory they name and Release it when the device is done with it; the
// registration outlives the transfer, so the next transfer from the same
// buffer finds it. Safe for concurrent use; one mutex guards it, held
// across calls of the Registrar, so a Registrar must not call back into
// the cache.
type Cache[K any] struct {
	h      *held[K]
	opt    Options
	idx    index[K]
	lru    lru[K]                 // idle indexed entries, least recently released first
	failed map[*entry[K]]struct{} // deregistration failed: still pinned, retried by Close
	clock  uint64                 // ticks, advanced by Tick
	token  uint64                 // the last use's token: each Acquire takes the next
	inUse  int
	stats  Stats
	closed bool
}

// held is the part of a Cache that must be undone even if the Cache is
// dropped without Close: the registrations and their pins. Nothing in it
// points back to the Cache (entries name it, not the Cache, as owner, and
// link to each other in the LRU), so a cleanup attached to the Cache can take it.
type held[K any] struct {
	mu      sync.Mutex // guards the whole Cache
	reg     Registrar[K]
	entries map[*entry[K]]struct{} // every registration held, indexed or not
}

// dropAll deregisters and unpins everything, for a Cache that became
// unreachable: no Release can come any more, and the runtime treats a
// Pinner dropped while pinning as a leak and panics.
func (h *held[K]) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for e := range h.entries {
		_ = h.reg.Deregister(e.key) // nobody is left to tell
		e.pin.Unpin()
		e.mem, e.uses = nil, 0
		delete(h.entries, e)
	}
}

// New returns an empty cache over r.
func New[K any](r Registrar[K], opt Options) (*Cache[K], error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cache[K]{
		h:      &held[K]{reg: r, entries: map[*entry[K]]struct{}{}},
		opt:    opt,
		idx:    index[K]{shift: uint(bits.TrailingZeros64(opt.FragmentSize)), frags: map[uintptr][]*entry[K]{}},
		failed: map[*entry[K]]struct{}{},
	}
	runtime.AddCleanup(c, (*held[K]).dropAll, c.h)
	return c, nil
}

// Options returns the cache's options with defaults filled in.
func (c *Cache[K]) Options() Options { return c.opt }

// Acquire returns a registration covering mem for one transfer and counts
// the transfer as in flight on it until Release. A registration of the
// same backing array that covers mem is reused (a hit). Otherwise (a miss)
// the fragments mem touches are registered, clipped to mem's backing array
// from mem's start to the end of its capacity and merged with idle
// registrations of the same array they overlap. The budget is
// MaxPinnedBytes less the bytes of registrations in use (idle ones are
// released LRU-first to make room): if the span does not fit it, mem alone
// is registered and the idle registrations are left as they are; if mem
// does not fit either, Acquire releases nothing and fails with an error
// wrapping ErrOverBudget, and the caller can fall back to copying.
//
// Backing arrays are told apart by where they end (the end of a slice's
// capacity): a registration overlapping mem's span but made for an array
// ending elsewhere (memory unmapped and mapped again at an overlapping
// address) is dropped, never served. A replacement mapping that ends at
// the same address as the old one, whatever its start, looks unchanged:
// its owner must call Invalidate. Go memory cannot change under a
// registration, which keeps it pinned and alive. A slice whose capacity
// was cut short (s[i:j:k]) counts as another array: it is served
// correctly, at the cost of a registration of its own, and the
// registrations of the whole array it overlaps are dropped.
func (c *Cache[K]) Acquire(mem []byte) (Region[K], error) {
	if len(mem) == 0 {
		return Region[K]{}, fmt.Errorf("%w: acquire of a zero-length slice", ErrEmpty)
	}
	start, end, objEnd := spanOf(mem)
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if c.closed {
		return Region[K]{}, fmt.Errorf("%w: acquire of %d bytes at %#x", ErrClosed, len(mem), start)
	}
	if e := c.idx.find(start, end, objEnd); e != nil {
		c.stats.Hits++
		return c.use(e, start), nil
	}
	c.stats.Misses++
	if room := c.room(); uint64(len(mem)) > room {
		// Checked before evicting anything: no eviction could make room.
		return Region[K]{}, fmt.Errorf("%w: acquire of %d bytes at %#x: only %d bytes can be made free (MaxPinnedBytes %d, %d bytes pinned in use)",
			ErrOverBudget, len(mem), start, room, c.opt.MaxPinnedBytes, c.stats.PinnedBytes-c.lru.bytes)
	}

	// Whole fragments, but never past the backing array: memory beyond a
	// Go object may be freed or scavenged under a registration.
	lo, hi := start, min(c.idx.roundUp(end), objEnd)
	var err error
	for _, o := range c.idx.overlapping(lo, hi) {
		if o.objEnd != objEnd {
			err = errors.Join(err, c.dropStale(o))
		}
	}
	if err != nil {
		return Region[K]{}, fmt.Errorf("acquire of %d bytes at %#x: %w", len(mem), start, err)
	}
	base, lo, hi, merged := c.merge(mem, lo, hi)
	for _, o := range merged {
		c.unindex(o)
		if err := c.release(o); err != nil {
			return Region[K]{}, fmt.Errorf("acquire of %d bytes at %#x: merging registrations: %w", len(mem), start, err)
		}
	}
	if err := c.makeRoom(uint64(hi - lo)); err != nil {
		return Region[K]{}, fmt.Errorf("acquire of %d bytes at %#x: %w", len(mem), start, err)
	}
	e, err := c.register(base[:hi-lo], objEnd)
	if err != nil {
		return Region[K]{}, err
	}
	return c.use(e, start), nil
}

// merge extends the span [lo, hi) of a miss on mem over the idle
// registrations of mem's array that it overlaps, so a buffer used
// piecewise ends up with one registration rather than one per piece. It
// returns the span, the slice it starts (base), and the registrations it
// replaces, for the caller to release. If the union does not fit the room
// makeRoom can make, the span is mem alone and nothing is replaced.
func (c *Cache[K]) merge(mem []byte, lo, hi uintptr) (base []byte, mlo, mhi uintptr, merged []*entry[K]) {
	start, end, _ := spanOf(mem)
	base = mem
	for _, o := range c.idx.overlapping(lo, hi) {
		if o.uses == 0 {
			merged = append(merged, o)
			if o.start < lo {
				lo, base = o.start, o.mem
			}
			hi = max(hi, o.end)
		}
	}
	if uint64(hi-lo) > c.room() {
		return mem, start, end, nil
	}
	return base, lo, hi, merged
}

// register pins span and registers it.
func (c *Cache[K]) register(span []byte, objEnd uintptr) (*entry[K], error) {
	e := &entry[K]{mem: span, objEnd: objEnd, owner: c.h}
	e.start, e.end, _ = spanOf(span)
	// Pinning the first byte pins the whole object (the runtime pins
	// objects, not bytes) and keeps it alive until Unpin, which is what
	// stops Go memory from changing under the registration. For memory the
	// runtime does not manage (mmap) it does nothing.
	e.pin.Pin(unsafe.SliceData(span))
	key, err := c.h.reg.Register(span, c.opt.Access)
	if err != nil {
		e.pin.Unpin()
		return nil, fmt.Errorf("%w: register %d bytes at %#x: %w", ErrRegistrar, len(span), e.start, err)
	}
	e.key = key
	e.indexed = true
	c.idx.add(e)
	c.h.entries[e] = struct{}{}
	c.stats.Registrations++
	c.stats.PinnedBytes += uint64(len(span))
	return e, nil
}

func (c *Cache[K]) use(e *entry[K], start uintptr) Region[K] {
	if e.uses == 0 {
		c.inUse++
		c.lru.remove(e)
	}
	e.uses++
	c.token++
	slot := len(e.tokens)
	if n := len(e.free); n > 0 {
		slot, e.free = e.free[n-1], e.free[:n-1]
	} else {
		e.tokens = append(e.tokens, 0)
	}
	e.tokens[slot] = c.token
	return Region[K]{Key: e.key, Offset: uint64(start - e.start), e: e, slot: slot, token: c.token}
}

// Release ends the transfer r was acquired for. The registration stays
// cached; it becomes a candidate for release once no transfer uses it.
// Releasing a Region not acquired from this cache, or releasing a Region
// (or a copy of it) again, is an error wrapping ErrNotAcquired and leaves
// the other transfers on its registration alone.
func (c *Cache[K]) Release(r Region[K]) error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	e := r.e
	switch {
	case e == nil:
		return fmt.Errorf("%w: zero Region", ErrNotAcquired)
	case e.owner != c.h:
		return fmt.Errorf("%w: Region of another cache", ErrNotAcquired)
	case e.uses == 0:
		return fmt.Errorf("%w: registration of %d bytes at %#x has no transfer in flight", ErrNotAcquired, e.end-e.start, e.start)
	case r.slot < 0 || r.slot >= len(e.tokens) || e.tokens[r.slot] != r.token:
		return fmt.Errorf("%w: Region at offset %d of the registration of %d bytes at %#x was already released (%d other transfers on it in flight)",
			ErrNotAcquired, r.Offset, e.end-e.start, e.start, e.uses)
	}
	e.tokens[r.slot] = 0
	e.free = append(e.free, r.slot)
	e.uses--
	if e.uses > 0 {
		return nil
	}
	c.inUse--
	if !e.indexed {
		// Dropped while in use (stale, invalidated, closed): its last
		// transfer is done, so the device may let go of it now.
		return c.release(e)
	}
	e.lastUse = c.clock
	c.lru.pushBack(e)
	return nil
}

// Invalidate drops every registration overlapping mem, for memory whose
// owner knows it changed in a way the cache cannot see (a shared segment
// detached and another attached at the same address, a mapping replaced by
// one that ends at the same address, whatever its start). Idle registrations are deregistered now; ones in
// use stop being found and are deregistered at their last Release.
func (c *Cache[K]) Invalidate(mem []byte) error {
	if len(mem) == 0 {
		return nil
	}
	start, end, _ := spanOf(mem)
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	var err error
	for _, e := range c.idx.overlapping(start, end) {
		err = errors.Join(err, c.dropStale(e))
	}
	if err != nil {
		return fmt.Errorf("invalidate of %d bytes at %#x: %w", len(mem), start, err)
	}
	return nil
}

// Tick advances the cache's clock by one tick (the patent's once a
// second; the owner's timer calls it, so tests need no clock) and releases
// registrations idle for Options.MaxIdleTicks ticks.
func (c *Cache[K]) Tick() error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.clock++
	if c.opt.MaxIdleTicks == 0 {
		return nil
	}
	for e := c.lru.head; e != nil; e = c.lru.head {
		if c.clock-e.lastUse < c.opt.MaxIdleTicks {
			break // the LRU is in release order, so the rest are younger
		}
		c.unindex(e)
		c.stats.Evictions++
		if err := c.release(e); err != nil {
			return fmt.Errorf("tick: %w", err)
		}
	}
	return nil
}

// Stats returns the cache's counters.
func (c *Cache[K]) Stats() Stats {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	s := c.stats
	s.Regions = len(c.h.entries)
	s.InUse = c.inUse
	return s
}

// Close deregisters every idle registration and refuses later Acquires.
// Registrations in use are deregistered at their last Release, and Close
// reports them with an error wrapping ErrInUse.
func (c *Cache[K]) Close() error {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.closed = true
	var err error
	for e := range c.failed {
		delete(c.failed, e)
		err = errors.Join(err, c.release(e))
	}
	for e := range c.h.entries {
		if e.indexed {
			c.unindex(e)
			if e.uses == 0 {
				err = errors.Join(err, c.release(e))
			}
		}
	}
	if c.inUse > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d registrations have transfers in flight; each is deregistered at its last Release", ErrInUse, c.inUse))
	}
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}
