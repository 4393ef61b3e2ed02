package shm

import "github.com/weft-hpc/weft/hal"

// CrossMemory is implemented by devices that copy directly between this
// process's memory and a peer's (cross-memory attach), the shm device's
// single-copy path for large RDMA transfers. It lives here until hal takes
// it.
//
// The device checks nothing about addr: the caller must have validated the
// whole access (address, length, read or write right) against its replica
// of the peer's TPT before calling, because the kernel only checks that the
// pages are mapped in the peer. Both methods copy all of the slice or fail;
// they may run concurrently with each other and with the device's other
// methods, but not after Close.
type CrossMemory interface {
	// CMA reports whether cross-memory attach works toward this device's
	// peers. When false, ReadFrom and WriteTo fail with an error wrapping
	// ErrNoCMA.
	CMA() bool
	// ReadFrom copies len(dst) bytes at addr in peer's address space into
	// dst.
	ReadFrom(peer hal.Rank, addr uintptr, dst []byte) error
	// WriteTo copies src to addr in peer's address space.
	WriteTo(peer hal.Rank, addr uintptr, src []byte) error
}
