// Package inproc is the device for ranks that are goroutines of one process:
// mpi.Run's ranks and every test that wants real concurrency without a
// network. It is reliable and ordered, so LAPI runs without its sequence and
// acknowledgement machinery over it.
//
// A Fabric is one job: NewFabric(size, jobKey), then Open(rank) once per
// rank. Send copies the frame once, into a buffer of the receiving rank's
// inbox taken from that inbox's free list; Poll hands the buffer to the
// caller's function and returns it to the free list. Nothing is allocated per
// frame once the free lists have warmed up, and nothing blocks but Wait.
//
// # RDMA
//
// The ranks share one address space, so the device is a
// hal.SharedAddressSpace: each rank's lapi shares its TPT through it, and
// a peer's large Put or Get is one memory copy, checked by the target's
// own TPT while it is read-locked (a Deregister waits for the copy). The
// fault wrapper does not pass this on: under WEFT_FAULTS RDMA goes by the
// software engine's frames.
//
// # Faults
//
// When WEFT_FAULTS is set when the Fabric is made, Open returns the device
// wrapped by faults.Wrap: it then reports itself unreliable and unordered,
// and loses, duplicates, corrupts and reorders frames as the variable says.
//
// # Imports
//
// inproc may import hal, internal/faults and the standard library only.
package inproc
