// Package lifecycle lets a device's Close run while another goroutine is
// inside one of its calls (typically Wait, blocked in a system call on the
// device's file descriptors) without closing a descriptor under it: a
// closed fd number can be reused at once by an unrelated open, and a late
// system call would then act on the wrong file. The UDP and verbs devices
// use it.
//
// It may import the standard library only.
package lifecycle

import "sync/atomic"

// Guard brackets the calls that use a device's descriptors. Every such
// call brackets itself with Enter/Leave, a pair of atomic adds; calls nest
// (a Poll callback may Send). Close marks the device closed and wakes any
// sleeper; whoever leaves last, Close or the call that was inside, runs
// Release. Close therefore never waits, so it may even be called from a
// Poll callback. A mutex would not do: a re-entrant reader deadlocks
// against a waiting Close.
type Guard struct {
	refs     atomic.Int64
	closed   atomic.Bool
	released atomic.Bool
	// Release closes the descriptors; it runs once. Set it before the
	// device is used.
	Release func()
}

// Enter admits a call, or reports false once the device is closed.
func (l *Guard) Enter() bool {
	l.refs.Add(1)
	if l.closed.Load() {
		l.Leave()
		return false
	}
	return true
}

// Leave ends a call admitted by Enter (or refused by it), releasing the
// device if it was closed meanwhile and this was the last call inside.
func (l *Guard) Leave() {
	// Both orders are safe: a leaver that does not yet see closed has
	// decremented before Close's own leave, which then sees zero.
	if l.refs.Add(-1) == 0 && l.closed.Load() && l.released.CompareAndSwap(false, true) {
		l.Release()
	}
}

// Closed reports whether Close has been called.
func (l *Guard) Closed() bool { return l.closed.Load() }

// Close marks the device closed, runs wake while the descriptors are
// certainly still open (Close counts as a call inside), and reports whether
// this call closed it.
func (l *Guard) Close(wake func()) bool {
	l.refs.Add(1)
	defer l.Leave()
	if !l.closed.CompareAndSwap(false, true) {
		return false
	}
	wake()
	return true
}
