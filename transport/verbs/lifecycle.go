//go:build verbs && linux && cgo

package verbs

import "sync/atomic"

// lifecycle lets Close run while another goroutine is inside a device call
// (typically Wait, blocked in ppoll) without freeing a verbs object or a
// file descriptor under it: a closed fd number can be reused at once by an
// unrelated open, and a late call would then act on the wrong object. (The
// same scheme as transport/udp's.)
//
// Every call that uses the descriptors brackets itself with enter/leave, a
// pair of atomic adds; calls nest (a Poll callback may Send). Close marks
// the device closed and wakes any sleeper; whoever leaves last, Close or the
// call that was inside, releases the descriptors. Close therefore never
// waits, so it may even be called from a Poll callback. A mutex would not
// do: a re-entrant reader deadlocks against a waiting Close.
type lifecycle struct {
	refs     atomic.Int64
	closed   atomic.Bool
	released atomic.Bool
	release  func() // closes the descriptors, once
}

// enter admits a call, or reports false once the device is closed.
func (l *lifecycle) enter() bool {
	l.refs.Add(1)
	if l.closed.Load() {
		l.leave()
		return false
	}
	return true
}

// leave ends a call admitted by enter (or refused by it), releasing the
// device if it was closed meanwhile and this was the last call inside.
func (l *lifecycle) leave() {
	// Both orders are safe: a leaver that does not yet see closed has
	// decremented before Close's own leave, which then sees zero.
	if l.refs.Add(-1) == 0 && l.closed.Load() && l.released.CompareAndSwap(false, true) {
		l.release()
	}
}

// close marks the device closed, runs wake while the descriptors are
// certainly still open (Close counts as a call inside), and reports whether
// this call closed it.
func (l *lifecycle) close(wake func()) bool {
	l.refs.Add(1)
	defer l.leave()
	if !l.closed.CompareAndSwap(false, true) {
		return false
	}
	wake()
	return true
}
