package hal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// CrossMemory is implemented by devices that copy directly between this
// process's memory and a peer's (cross-memory attach: the shm device's
// process_vm_readv/writev). It is one-sided and single-copy, and the
// kernel checks only that the pages are mapped in the peer: the caller
// validates the whole access against its Replica of the peer's TPT first,
// which is what the TPT updates peers push are for.
//
// Both methods copy all of the slice or fail; they may run concurrently
// with each other and with the device's other methods, but not after
// Close.
type CrossMemory interface {
	// CMA reports whether cross-memory attach works toward this device's
	// peers. When false, ReadFrom and WriteTo fail.
	CMA() bool
	// ReadFrom copies len(dst) bytes at addr in peer's address space
	// into dst.
	ReadFrom(peer Rank, addr uintptr, dst []byte) error
	// WriteTo copies src to addr in peer's address space.
	WriteTo(peer Rank, addr uintptr, src []byte) error
}

// SharedAddressSpace is implemented by devices whose peers are goroutines
// of this process (inproc): RDMA toward them is one memory copy, checked
// by the peer's own TPT rather than a replica, so it is exact — a region
// deregistered before the copy starts fails the key check, and one being
// deregistered waits for the copy to end.
type SharedAddressSpace interface {
	// ShareTPT makes t the TPT this device's peers reach this rank's
	// memory through, until the device is closed.
	ShareTPT(t *TPT)
	// PeerTPT is the TPT peer shared, or nil (none yet, or its device is
	// closed).
	PeerTPT(peer Rank) *TPT
}

// TPTEntry is one TPT entry as a peer's replica holds it: where the region
// is in the owner's address space, and what it allows. Key 0 removes the
// entry's registration under the key Removed.
type TPTEntry struct {
	Entry  uint32
	Key    uint64
	Addr   uint64
	Len    uint64
	Access Access
	// RKey is the key under which the owner's adapter lets peers reach
	// the region by hardware RDMA (OneSided: an MR registration covering
	// it, at the same addresses); 0 when the region is not registered
	// with one, and transfers to it go another way.
	RKey uint32
	// Removed is, in a removal (Key 0), the key the entry had: a removal
	// told after the registration that took the entry next (the two
	// watcher calls race) must not remove that one. 0 in an addition.
	Removed uint64
}

// tptEntryLen is an entry's encoded size in a FrameTPTUpdate payload.
const tptEntryLen = 4 + 8 + 8 + 8 + 1 + 4

// MaxTPTEntries is how many entries one update frame of payload size mtu
// may carry.
func MaxTPTEntries(mtu int) int { return (mtu - 2) / tptEntryLen }

// ErrBadTPTUpdate is wrapped by every TPT update decoding failure.
var ErrBadTPTUpdate = errors.New("hal: malformed TPT update")

// EncodeTPTUpdate writes a FrameTPTUpdate payload carrying es into b and
// returns its length: a u16 count, then each entry (entry u32, key u64,
// addr u64, len u64, access u8, rkey u32), little-endian. A removal (key
// 0) carries the key it removed (Removed, never 0) in the addr field, and
// 0 in len, access and rkey: a removal has no region. b must hold
// 2+len(es)*tptEntryLen bytes.
func EncodeTPTUpdate(b []byte, es []TPTEntry) int {
	le := binary.LittleEndian
	le.PutUint16(b, uint16(len(es)))
	o := 2
	for _, e := range es {
		if e.Key == 0 {
			e = TPTEntry{Entry: e.Entry, Addr: e.Removed} // a removal has no region
		}
		le.PutUint32(b[o:], e.Entry)
		le.PutUint64(b[o+4:], e.Key)
		le.PutUint64(b[o+12:], e.Addr)
		le.PutUint64(b[o+20:], e.Len)
		b[o+28] = byte(e.Access)
		le.PutUint32(b[o+29:], e.RKey)
		o += tptEntryLen
	}
	return o
}

// DecodeTPTUpdate parses a FrameTPTUpdate payload, appending its entries
// to es.
func DecodeTPTUpdate(b []byte, es []TPTEntry) ([]TPTEntry, error) {
	if len(b) < 2 {
		return es, fmt.Errorf("%w: %d bytes", ErrBadTPTUpdate, len(b))
	}
	le := binary.LittleEndian
	n := int(le.Uint16(b))
	if len(b) != 2+n*tptEntryLen {
		return es, fmt.Errorf("%w: %d entries in %d bytes", ErrBadTPTUpdate, n, len(b))
	}
	for o := 2; o < len(b); o += tptEntryLen {
		e := TPTEntry{Entry: le.Uint32(b[o:]), Key: le.Uint64(b[o+4:]), Addr: le.Uint64(b[o+12:]),
			Len: le.Uint64(b[o+20:]), Access: Access(b[o+28]), RKey: le.Uint32(b[o+29:])}
		if e.Key == 0 {
			if e.Addr == 0 || e.Len != 0 || e.Access != 0 || e.RKey != 0 {
				return es, fmt.Errorf("%w: removal of entry %d: removed key %#x, len %d, access %#x, rkey %#x (want a key and no region)",
					ErrBadTPTUpdate, e.Entry, e.Addr, e.Len, e.Access, e.RKey)
			}
			e = TPTEntry{Entry: e.Entry, Removed: e.Addr}
		} else if e.Access&^(AccessRead|AccessWrite) != 0 || e.Addr+e.Len < e.Addr {
			return es, fmt.Errorf("%w: entry %d: access %#x, %d bytes at %#x", ErrBadTPTUpdate, e.Entry, e.Access, e.Len, e.Addr)
		}
		es = append(es, e)
	}
	return es, nil
}

// Replica is this rank's copy of one peer's TPT, kept from the updates
// the peer pushes, against which every cross-memory access is validated
// before the kernel is asked to copy. Not safe for concurrent use.
type Replica struct {
	entries map[uint32]TPTEntry
}

// Apply records an update: an entry added, replaced, or (Key 0) removed.
// A removal removes only the registration it names (Removed): one that
// comes after the next registration at its entry, which the owner's
// watcher calls may tell in that order, leaves the new one in place.
func (r *Replica) Apply(e TPTEntry) {
	if r.entries == nil {
		r.entries = make(map[uint32]TPTEntry)
	}
	if e.Key == 0 {
		if cur, ok := r.entries[e.Entry]; ok && cur.Key == e.Removed {
			delete(r.entries, e.Entry)
		}
		return
	}
	r.entries[e.Entry] = e
}

// Clear forgets every entry: the peer restarted.
func (r *Replica) Clear() { clear(r.entries) }

// Entry is the replica's entry for p, if it holds p's registration (Has).
func (r *Replica) Entry(p PVO) (TPTEntry, bool) {
	e, ok := r.entries[p.Entry]
	return e, ok && e.Key == p.Key
}

// Has reports whether the replica holds p's registration: p's entry under
// p's key. A miss is not a refusal: the owner's update may not have come
// yet (the entry is missing, or still holds an earlier registration's
// key), or p may be stale, and only the owner's own TPT can tell which.
func (r *Replica) Has(p PVO) bool {
	_, ok := r.Entry(p)
	return ok
}

// Check validates an access of n bytes at p with acc as the peer's TPT
// would (key, bounds, access) and returns the address in the peer's
// address space.
func (r *Replica) Check(p PVO, n uint64, acc Access) (uintptr, error) {
	e, ok := r.entries[p.Entry]
	switch {
	case !ok:
		return 0, &ProtectionError{Check: "entry", PVO: p, Len: n}
	case e.Key != p.Key:
		return 0, &ProtectionError{Check: "key", PVO: p, Len: n}
	case p.Offset > e.Len || n > e.Len-p.Offset:
		return 0, &ProtectionError{Check: "bounds", PVO: p, Len: n}
	case e.Access&acc != acc:
		return 0, &ProtectionError{Check: "access", PVO: p, Len: n}
	}
	return uintptr(e.Addr + p.Offset), nil
}

// addrOf is where mem starts (0 for an empty slice).
func addrOf(mem []byte) uint64 {
	if len(mem) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
}
