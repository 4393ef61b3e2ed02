package hal

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weft-hpc/weft/internal/track"
)

// Access is what a region allows remote peers to do.
type Access uint8

// Access rights.
const (
	AccessRead  Access = 1 << iota // remote Get and RDMA Read
	AccessWrite                    // remote Put, RDMA Write and Rmw
)

// PVO is a protocol virtual offset: the name of a place in a registered
// region that a peer may use. It carries the entry's key, so that a PVO from
// before a deregistration, or from an earlier process, is refused.
type PVO struct {
	Entry  uint32 // TPT entry index
	Offset uint64 // bytes from the start of the region
	Key    uint64 // the entry's key when it was registered
}

// PVOLen is the encoded size of a PVO.
const PVOLen = 20

// PutPVO encodes p into b[:PVOLen].
func PutPVO(b []byte, p PVO) {
	binary.LittleEndian.PutUint32(b, p.Entry)
	binary.LittleEndian.PutUint64(b[4:], p.Offset)
	binary.LittleEndian.PutUint64(b[12:], p.Key)
}

// GetPVO decodes a PVO from b[:PVOLen].
func GetPVO(b []byte) PVO {
	return PVO{
		Entry:  binary.LittleEndian.Uint32(b),
		Offset: binary.LittleEndian.Uint64(b[4:]),
		Key:    binary.LittleEndian.Uint64(b[12:]),
	}
}

// Add returns the PVO n bytes further into the region.
func (p PVO) Add(n uint64) PVO { p.Offset += n; return p }

// ErrProtection is wrapped by every TPT check failure; the ProtectionError
// says which check failed.
var ErrProtection = errors.New("hal: protection violation")

// ProtectionError names the check a remote access failed.
type ProtectionError struct {
	Check string // "entry", "key", "bounds" or "access"
	PVO   PVO
	Len   uint64
}

func (e *ProtectionError) Error() string {
	return fmt.Sprintf("hal: protection violation: %s check failed for entry %d offset %d len %d",
		e.Check, e.PVO.Entry, e.PVO.Offset, e.Len)
}

// Unwrap makes errors.Is(err, ErrProtection) true.
func (e *ProtectionError) Unwrap() error { return ErrProtection }

// TPT is a rank's translation and protection table: PVO → memory, length,
// access. It is global to the rank, so a key issued through one device
// resolves on every device the rank has open. Safe for concurrent use.
type TPT struct {
	mu      sync.RWMutex
	entries []tptEntry
	free    []uint32
	nextKey uint64
	watch   func(TPTEntry) // told of every change, outside the lock
	// removals counts deregistrations: a region resolved while it has
	// not moved is still valid, so the RDMA engine need not resolve
	// every packet of a transfer again.
	removals atomic.Uint64
	// trk records the registrations made from outside weft (Track); nil:
	// none are.
	trk *track.Registry
}

// Removals is how many regions have been deregistered so far.
func (t *TPT) Removals() uint64 { return t.removals.Load() }

type tptEntry struct {
	mem    []byte
	access Access
	key    uint64 // 0: free
	local  bool   // RegisterLocal: the watcher is not told
	trk    track.ID
}

// NewTPT makes an empty table whose keys start from a random seed, so keys
// of an earlier process (trickle traffic across a restart) do not match.
func NewTPT() *TPT {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails on Linux; a zero seed is still correct
	return &TPT{nextKey: binary.LittleEndian.Uint64(b[:]) | 1}
}

// Track has r record every later registration whose Register or
// RegisterLocal was called from outside weft, with that call's site, until
// its Deregister: what a user leaves registered is then named at the end.
// weft's own registrations are not recorded: each belongs to a resource
// (a request, a window) that is. nil stops recording. Call it before the
// table is in use.
func (t *TPT) Track(r *track.Registry) {
	t.mu.Lock()
	t.trk = r
	t.mu.Unlock()
}

// Register makes mem reachable with the given access and returns its PVO.
// The caller must keep mem alive and not move it until Deregister.
func (t *TPT) Register(mem []byte, acc Access) (PVO, error) {
	return t.register(mem, acc, false)
}

// RegisterLocal is Register for a region only this rank's own RDMA engine
// addresses (where a read it asked for lands, say): its PVO never goes to
// a peer, so the watcher is not told of it.
func (t *TPT) RegisterLocal(mem []byte, acc Access) (PVO, error) {
	return t.register(mem, acc, true)
}

func (t *TPT) register(mem []byte, acc Access, local bool) (PVO, error) {
	if acc&^(AccessRead|AccessWrite) != 0 || acc == 0 {
		return PVO{}, fmt.Errorf("hal: register: bad access %#x", acc)
	}
	t.mu.Lock()
	t.nextKey += 0x9e3779b97f4a7c15 // golden-ratio step: keys never repeat soon
	if t.nextKey == 0 {
		t.nextKey++
	}
	e := tptEntry{mem: mem, access: acc, key: t.nextKey, local: local}
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
		t.entries[idx] = e
	} else {
		idx = uint32(len(t.entries))
		t.entries = append(t.entries, e)
	}
	w, trk := t.watch, t.trk
	t.mu.Unlock()
	if w != nil && !local {
		w(TPTEntry{Entry: idx, Key: e.key, Addr: addrOf(mem), Len: uint64(len(mem)), Access: acc})
	}
	if trk != nil {
		// After the table's lock, where the lines above stay as the
		// profile (bench/default.pgo) knows them.
		t.track(trk, idx, e.key, len(mem))
	}
	return PVO{Entry: idx, Key: e.key}, nil
}

// track records the registration of n bytes just made at entry idx with
// key, if its Register was called from outside weft (Track).
func (t *TPT) track(trk *track.Registry, idx uint32, key uint64, n int) {
	// skip 3: track's caller is register, then Register or
	// RegisterLocal, whose caller made the registration.
	id := trk.AddUser(fmt.Sprintf("registration of %d bytes", n), 3)
	if id == 0 {
		return
	}
	t.mu.Lock()
	if e := &t.entries[idx]; e.key == key {
		e.trk = id
		id = 0
	}
	t.mu.Unlock()
	trk.Remove(id) // deregistered meanwhile
}

// Watch has fn told of every later registration and deregistration (a
// removal has Key 0, and the key it removed in Removed), after the table
// has changed and outside its lock, in the registering goroutine: this is
// how a rank's peers keep replicas of its table. Calls for one entry may
// come out of order: a deregistration's can come after the call for the
// registration that took the freed entry next, which the removed key tells
// apart. One watcher; nil removes it.
func (t *TPT) Watch(fn func(TPTEntry)) {
	t.mu.Lock()
	t.watch = fn
	t.mu.Unlock()
}

// Entries returns every entry in the table, for a peer whose replica
// starts afresh.
func (t *TPT) Entries() []TPTEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var es []TPTEntry
	for i, e := range t.entries {
		if e.key != 0 && !e.local {
			es = append(es, TPTEntry{Entry: uint32(i), Key: e.key, Addr: addrOf(e.mem), Len: uint64(len(e.mem)), Access: e.access})
		}
	}
	return es
}

// Deregister removes the region p names. Later accesses with its PVO fail
// the key check. A placement into the region by this rank's RDMA engine,
// or a Copy, that is under way waits for Deregister's lock, so when
// Deregister returns the memory is its owner's again: nothing more lands
// in it. Two uses of the memory can outlast it, and are their users' to
// stop: the Dst of a half-RDMA packet (EvFIFO) the engine handed up
// before, which a driver writes into after the engine's check unless it
// resolves the packet's Place again under Hold; and the bytes of a read
// being served (RDMAStream.Next) that a device still holds until its
// Flush, which are read, never written.
func (t *TPT) Deregister(p PVO) error {
	t.mu.Lock()
	if _, err := t.lookup(p, 0, 0); err != nil {
		t.mu.Unlock()
		return fmt.Errorf("hal: deregister: %w", err)
	}
	local := t.entries[p.Entry].local
	if id := t.entries[p.Entry].trk; id != 0 {
		t.trk.Remove(id)
	}
	t.entries[p.Entry] = tptEntry{}
	t.removals.Add(1)
	t.free = append(t.free, p.Entry)
	w := t.watch
	t.mu.Unlock()
	if w != nil && !local {
		w(TPTEntry{Entry: p.Entry, Removed: p.Key})
	}
	return nil
}

// Resolve checks an access of n bytes at p and returns the memory.
func (t *TPT) Resolve(p PVO, n uint64, acc Access) ([]byte, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.lookup(p, n, acc)
}

// Hold checks an access of n bytes at p as Resolve does and, when it
// passes, returns the memory with the table left read-locked until
// Unhold: a Deregister of the region waits for the Unhold, so what the
// caller writes into the memory meanwhile lands before Deregister returns,
// never after. Between the two the caller must neither register nor
// deregister, and should hold the table only as long as a copy takes.
func (t *TPT) Hold(p PVO, n uint64, acc Access) ([]byte, error) {
	t.mu.RLock()
	mem, err := t.lookup(p, n, acc)
	if err != nil {
		t.mu.RUnlock()
		return nil, err
	}
	return mem, nil
}

// Unhold ends a Hold that succeeded.
func (t *TPT) Unhold() { t.mu.RUnlock() }

// Copy is an RDMA by memory copy within this process: with AccessWrite it
// copies buf into the region at p, with AccessRead the region into buf,
// after the checks a Resolve of len(buf) bytes makes. The table stays
// read-locked during the copy, so a Deregister of the region waits for it
// and nothing lands in memory its owner has taken back.
func (t *TPT) Copy(p PVO, buf []byte, acc Access) error {
	if acc != AccessRead && acc != AccessWrite {
		return fmt.Errorf("hal: copy: access %#x, want read or write", acc)
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	mem, err := t.lookup(p, uint64(len(buf)), acc)
	if err != nil {
		return err
	}
	if acc == AccessWrite {
		copy(mem, buf)
	} else {
		copy(buf, mem)
	}
	return nil
}

func (t *TPT) lookup(p PVO, n uint64, acc Access) ([]byte, error) {
	if uint64(p.Entry) >= uint64(len(t.entries)) {
		return nil, &ProtectionError{Check: "entry", PVO: p, Len: n}
	}
	e := &t.entries[p.Entry]
	if e.key == 0 || e.key != p.Key {
		return nil, &ProtectionError{Check: "key", PVO: p, Len: n}
	}
	if p.Offset > uint64(len(e.mem)) || n > uint64(len(e.mem))-p.Offset {
		return nil, &ProtectionError{Check: "bounds", PVO: p, Len: n}
	}
	if e.access&acc != acc {
		return nil, &ProtectionError{Check: "access", PVO: p, Len: n}
	}
	return e.mem[p.Offset : p.Offset+n : p.Offset+n], nil
}
