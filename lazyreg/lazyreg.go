package lazyreg

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Registrar is what the cache sits on: a device's (or the rank's TPT's)
// memory registration. K is the registration's handle, the thing a
// transfer names memory by: a hal.PVO for the TPT, an MR's keys for verbs.
//
// *hal.TPT satisfies Registrar[hal.PVO] as it is.
type Registrar[K any] interface {
	// Register makes mem reachable by RDMA with the given access and
	// returns its handle. The cache keeps mem pinned and alive until it
	// calls Deregister with that handle.
	Register(mem []byte, acc hal.Access) (K, error)
	// Deregister undoes one Register. After it returns the device must not
	// touch the memory again.
	Deregister(K) error
}

// Defaults for the zero fields of Options.
const (
	DefaultFragmentSize   = 16 << 20  // the patent's fragment
	DefaultMaxPinnedBytes = 256 << 20 // what idle buffers may keep alive and pinned; a verbs device needs RLIMIT_MEMLOCK above it
	DefaultMaxRegions     = 1024      // NICs' memory tables hold thousands; leave room for other users
)

// Options configure a Cache. The zero value is ready to use.
type Options struct {
	// FragmentSize is the unit the address space is cut into, a power of
	// two; a miss registers the fragments a transfer touches (clipped to
	// its backing array). 0 means DefaultFragmentSize.
	FragmentSize uint64
	// MaxPinnedBytes bounds the bytes the cache keeps registered; idle
	// registrations are released LRU-first to stay under it. 0 means
	// DefaultMaxPinnedBytes.
	MaxPinnedBytes uint64
	// MaxRegions bounds the number of registrations the cache holds.
	// 0 means DefaultMaxRegions.
	MaxRegions int
	// MaxIdleTicks releases a registration that has been idle for this
	// many calls of Tick (the patent ticks once a second). 0 means idle
	// registrations are only released to stay within the bounds.
	MaxIdleTicks uint64
	// Access is what every registration allows: one cache registers with
	// one access, so that any cached registration serves any transfer.
	// 0 means hal.AccessRead|hal.AccessWrite.
	Access hal.Access
}

// Region is one acquired use of a registration: the memory passed to
// Acquire lies Offset bytes into the registration Key names. It stays
// registered until Release. Copies of a Region are the same use: one of
// them is released, once.
type Region[K any] struct {
	Key    K      // the registration's handle
	Offset uint64 // where the acquired memory starts within the registration
	e      *entry[K]
	slot   int    // the use's slot in e.tokens
	token  uint64 // the use's token, there until it is released
}

// Stats are a cache's counters, a snapshot taken under its lock.
type Stats struct {
	Hits            uint64 // Acquires served by a registration already held
	Misses          uint64 // Acquires that registered memory
	Registrations   uint64 // calls of Registrar.Register that succeeded
	Deregistrations uint64 // calls of Registrar.Deregister that succeeded
	Evictions       uint64 // idle registrations released for a bound or for idleness
	Stale           uint64 // registrations dropped because their memory changed (or Invalidate)
	PinnedBytes     uint64 // bytes registered now
	Regions         int    // registrations held now
	InUse           int    // registrations with transfers in flight now
}

// HitRate is Hits over all Acquires, 0 when there were none.
func (s Stats) HitRate() float64 {
	if n := s.Hits + s.Misses; n > 0 {
		return float64(s.Hits) / float64(n)
	}
	return 0
}

// Errors. Each error a Cache returns wraps one of these and names the
// memory and the cause.
var (
	ErrOptions     = errors.New("lazyreg: bad options")
	ErrEmpty       = errors.New("lazyreg: empty region")
	ErrNotAcquired = errors.New("lazyreg: release of a region not acquired")
	ErrOverBudget  = errors.New("lazyreg: over the pinned-memory budget")
	ErrInUse       = errors.New("lazyreg: registration in use")
	ErrClosed      = errors.New("lazyreg: cache closed")
	// ErrRegistrar is wrapped, together with the device's own error, by a
	// failure of Registrar.Register or Registrar.Deregister.
	ErrRegistrar = errors.New("lazyreg: registrar failed")
)

func (o Options) withDefaults() (Options, error) {
	if o.FragmentSize == 0 {
		o.FragmentSize = DefaultFragmentSize
	}
	if o.FragmentSize&(o.FragmentSize-1) != 0 {
		return o, fmt.Errorf("%w: FragmentSize %d is not a power of two", ErrOptions, o.FragmentSize)
	}
	if o.MaxPinnedBytes == 0 {
		o.MaxPinnedBytes = DefaultMaxPinnedBytes
	}
	if o.MaxRegions == 0 {
		o.MaxRegions = DefaultMaxRegions
	}
	if o.MaxRegions < 0 {
		return o, fmt.Errorf("%w: MaxRegions %d is negative", ErrOptions, o.MaxRegions)
	}
	if o.Access == 0 {
		o.Access = hal.AccessRead | hal.AccessWrite
	}
	if o.Access&^(hal.AccessRead|hal.AccessWrite) != 0 {
		return o, fmt.Errorf("%w: Access %#x", ErrOptions, o.Access)
	}
	return o, nil
}
