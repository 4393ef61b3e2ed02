package lazyreg

import "fmt"

// makeRoom releases idle registrations, least recently used first, until
// a registration of n more bytes fits both bounds. Registrations in use
// are never released: if they alone fill the budget, the caller gets
// ErrOverBudget and can fall back to a copying path.
func (c *Cache[K]) makeRoom(n uint64) error {
	for c.stats.PinnedBytes+n > c.opt.MaxPinnedBytes || len(c.h.entries)+1 > c.opt.MaxRegions {
		e := c.lru.head
		if e == nil {
			return fmt.Errorf("%w: %d more bytes do not fit: %d bytes pinned in %d registrations, %d in use (bounds %d bytes, %d registrations)",
				ErrOverBudget, n, c.stats.PinnedBytes, len(c.h.entries), c.inUse, c.opt.MaxPinnedBytes, c.opt.MaxRegions)
		}
		c.unindex(e)
		c.stats.Evictions++
		if err := c.release(e); err != nil {
			return err
		}
	}
	return nil
}

// dropStale stops lookups finding e, whose memory changed, and releases it
// now if no transfer uses it (else at its last Release).
func (c *Cache[K]) dropStale(e *entry[K]) error {
	c.unindex(e)
	c.stats.Stale++
	if e.uses > 0 {
		return nil
	}
	return c.release(e)
}

// unindex takes e out of the fragment index and the LRU.
func (c *Cache[K]) unindex(e *entry[K]) {
	if !e.indexed {
		return
	}
	c.idx.remove(e)
	e.indexed = false
	c.lru.remove(e)
}

// release deregisters e, which no transfer uses and no lookup finds, and
// unpins its memory. If the device refuses, the memory stays pinned (the
// device may still reach it) and Close tries again.
func (c *Cache[K]) release(e *entry[K]) error {
	if err := c.h.reg.Deregister(e.key); err != nil {
		c.failed[e] = struct{}{}
		return fmt.Errorf("%w: deregister %d bytes at %#x: %w", ErrRegistrar, e.end-e.start, e.start, err)
	}
	e.pin.Unpin()
	e.mem = nil
	delete(c.h.entries, e)
	delete(c.failed, e)
	c.stats.Deregistrations++
	c.stats.PinnedBytes -= uint64(e.end - e.start)
	return nil
}

// room returns how many bytes a new registration may take: the budget
// less what makeRoom cannot release, the registrations in use (and those
// whose deregistration failed). Idle registrations count as room.
func (c *Cache[K]) room() uint64 {
	fixed := c.stats.PinnedBytes - c.lru.bytes
	if fixed >= c.opt.MaxPinnedBytes {
		return 0
	}
	return c.opt.MaxPinnedBytes - fixed
}

// lru lists idle registrations, least recently released at the head. It
// is intrusive (links in the entries) so that Release, on every
// transfer's path, allocates nothing.
type lru[K any] struct {
	head, tail *entry[K]
	bytes      uint64 // registered bytes of the entries listed
}

func (l *lru[K]) pushBack(e *entry[K]) {
	e.prev, e.next, e.inLRU = l.tail, nil, true
	l.bytes += uint64(e.end - e.start)
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
}

// remove takes e out of the list if it is in it.
func (l *lru[K]) remove(e *entry[K]) {
	if !e.inLRU {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next, e.inLRU = nil, nil, false
	l.bytes -= uint64(e.end - e.start)
}
