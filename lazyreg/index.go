package lazyreg

import (
	"runtime"
	"unsafe"
)

// entry is one registration: a span of one backing array, registered once
// and kept while transfers use it or until the cache releases it.
type entry[K any] struct {
	key        K
	mem        []byte  // the registered span; its capacity reaches objEnd
	start, end uintptr // the span's addresses, [start, end)
	// objEnd is where the backing array of the registered slice ends. Every
	// slice of one array (resliced without a capacity) ends its capacity
	// there, so it tells a request on the same memory from one on memory
	// that was unmapped and mapped again at an overlapping address.
	objEnd     uintptr
	pin        runtime.Pinner
	uses       int       // transfers in flight
	lastUse    uint64    // the cache's tick when uses last fell to 0
	inLRU      bool      // in the cache's LRU: idle and indexed
	prev, next *entry[K] // LRU links
	indexed    bool      // lookups find it; false once stale or evicted
	owner      *held[K]  // so a Region from another cache is refused
	// tokens holds the token of each use in flight in its slot (0 in a
	// free one), so that a Region released twice is told from another
	// transfer on the registration; free lists the free slots. Both keep
	// their capacity, so a hit allocates nothing.
	tokens []uint64
	free   []int
}

// spanOf returns where mem starts and ends, and where its backing array
// ends, as addresses. mem must not be empty.
func spanOf(mem []byte) (start, end, objEnd uintptr) {
	start = uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	return start, start + uintptr(len(mem)), start + uintptr(cap(mem))
}

// index maps fragment numbers to the registrations overlapping them: the
// patent's bit vector and auxiliary array in one map, since a 64-bit
// address space has too many fragments for a vector. A registration
// spanning several fragments is listed under each.
type index[K any] struct {
	shift uint // log2 of the fragment size
	frags map[uintptr][]*entry[K]
}

func (x *index[K]) frag(addr uintptr) uintptr { return addr >> x.shift }

// roundUp returns addr rounded up to a fragment boundary.
func (x *index[K]) roundUp(addr uintptr) uintptr {
	m := uintptr(1)<<x.shift - 1
	return (addr + m) &^ m
}

func (x *index[K]) add(e *entry[K]) {
	for f := x.frag(e.start); f <= x.frag(e.end-1); f++ {
		x.frags[f] = append(x.frags[f], e)
	}
}

func (x *index[K]) remove(e *entry[K]) {
	for f := x.frag(e.start); f <= x.frag(e.end-1); f++ {
		l := x.frags[f]
		for i, o := range l {
			if o == e {
				l[i] = l[len(l)-1]
				l[len(l)-1] = nil
				l = l[:len(l)-1]
				break
			}
		}
		if len(l) == 0 {
			delete(x.frags, f)
		} else {
			x.frags[f] = l
		}
	}
}

// find returns a registration of the same backing array covering
// [start, end), or nil. Any covering registration overlaps start's
// fragment, so one list is searched.
func (x *index[K]) find(start, end, objEnd uintptr) *entry[K] {
	for _, e := range x.frags[x.frag(start)] {
		if e.start <= start && end <= e.end && e.objEnd == objEnd {
			return e
		}
	}
	return nil
}

// overlapping returns each registration overlapping [start, end) once.
func (x *index[K]) overlapping(start, end uintptr) []*entry[K] {
	var out []*entry[K]
	for f := x.frag(start); f <= x.frag(end-1); f++ {
		for _, e := range x.frags[f] {
			// Report e only in the first fragment where it and the range
			// meet, so an entry listed under several is reported once.
			if e.start < end && start < e.end && x.frag(max(e.start, start)) == f {
				out = append(out, e)
			}
		}
	}
	return out
}
