package shm

// This file holds every use of package unsafe in shm: turning offsets in
// the shared mapping into word pointers for sync/atomic, and passing those
// words to the futex system call. The invariants that make it sound:
//
//  1. Liveness. A pointer made here points into a device's mapping, which
//     is created by Open and unmapped only once the device is closed and
//     no call is inside it (life_linux.go): Close may run at any time, from
//     any goroutine (hal's contract), so Send, SendShort, Flush, Poll,
//     PrepareSend and Connect count themselves in and out, and the last
//     one out unmaps; Wait and the wake-up run by a cancelled context hold
//     the device's waiters lock, which the release takes before
//     unmapping. No pointer outlives the device: they are kept only in the
//     device's own structures.
//  2. Bounds. Pointers are made from a slice of the mapping with the
//     ordinary bounds checks ("b[off:off+8]"), so a bad offset panics in
//     the runtime's checks instead of reading another object, and offsets
//     computed from shared data are validated before they get here.
//  3. Alignment. The mapping is page-aligned and every offset in layout.go
//     is a multiple of the word's size, as sync/atomic requires.
//  4. Not Go memory. The mapping is outside the Go heap: the garbage
//     collector neither scans nor moves it, so the pointers may be kept and
//     handed to the kernel as plain addresses; the race detector does not
//     see it either, so every word another process or goroutine may touch
//     concurrently is read and written only with sync/atomic, and plain
//     byte copies are ordered by an atomic store (publish) on one side and
//     an atomic load (acquire) on the other.

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// word64 is the 64-bit word at b[off:].
func word64(b []byte, off int) *uint64 {
	return (*uint64)(unsafe.Pointer(&b[off : off+8][0]))
}

// word32 is the 32-bit word at b[off:].
func word32(b []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&b[off : off+4][0]))
}

// Futex operations (linux/futex.h). The words live in a MAP_SHARED file
// mapping and are shared between processes, so FUTEX_PRIVATE_FLAG must not
// be set.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps while *w == val, at most d. It returns early, without
// telling why, when woken, when *w != val already, on a signal or at the
// timeout: callers re-check their condition in a loop.
func futexWait(w *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(max(int64(d), 0))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp,
		uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every thread sleeping on w.
func futexWake(w *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp,
		uintptr(1<<31-1), 0, 0, 0)
}

// addrOf is the address of a word of Go memory, published to peers for
// them to read with process_vm_readv (the CMA probe). The word is
// heap-allocated and referenced by its device for the device's lifetime,
// and Go's collector does not move heap objects, so the address stays valid
// while peers may read it.
func addrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }

// bufAddr is the address of b's first byte, as a peer passes it to
// ReadFrom or WriteTo (the tests' stand-in for a TPT lookup). b must be
// non-empty, and kept alive by the caller while peers may use the address.
func bufAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
