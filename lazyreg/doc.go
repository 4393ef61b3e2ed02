// Package lazyreg is weft's registration cache: lazy deregistration of the
// memory that RDMA transfers name, so that the cost of registering a buffer
// (pinning its pages, entering it in a TPT or a NIC's memory table) is paid
// once per buffer, not once per message.
//
// The design is the lazy-deregistration model of IBM's RDMA patent (seed 002
// in ../shared/seeds, DESIGN.md "lazyreg"): the address space is cut into
// fixed fragments (16 MiB by default); an index of fragments (a map, since
// the space is 64-bit) says which are registered and holds their
// registrations; a lookup that falls inside a registration reuses it, a miss
// registers whole fragments; each registration has a use count (transfers in
// flight) and an idle count, and idle ones are released least recently used
// first when a bound on pinned bytes or registrations is exceeded, or when
// they have been idle too long.
//
// Go adds two rules the patent's C library did not need. A registration
// never covers memory beyond the backing array of the slice that caused it
// (whole fragments are clipped to it), because memory outside a live Go
// object may be freed, scavenged or reused under the registration. And while
// registered, the backing array is pinned with runtime.Pinner, which also
// keeps it alive: Go memory cannot be reused under a cached registration, so
// the stale case is memory the runtime does not manage (mmap'd or shared
// segments); see Cache.Acquire and Cache.Invalidate.
//
// The cache is device-independent: it sits on a Registrar, which hal's TPT
// implements as it is (Registrar[hal.PVO]) and a verbs device would
// implement around ibv_reg_mr/ibv_dereg_mr.
//
// Files by concern: lazyreg.go is the contract (Registrar, Options, Region,
// Stats, errors); cache.go the Cache's operations; index.go the fragment
// index and span arithmetic; evict.go the LRU, the bounds and the release of
// registrations.
//
// lazyreg may import the standard library, hal (for hal.Access) and
// internal packages other than internal/launch (deps_test.go); it is used
// by lapi, mpi and devices that register memory.
package lazyreg
