package udp

import "sync/atomic"

// lifecycle lets Close run while another goroutine is inside a device call
// (typically Wait, blocked in ppoll) without closing a file descriptor under
// it: a closed fd number can be reused at once by an unrelated open, and a
// late system call would then act on the wrong file.
//
// Every call that uses the descriptors brackets itself with enter/leave, a
// pair of atomic adds; calls nest (a Poll callback may Send). Close marks
// the device closed, wakes any sleeper, and waits until no call is inside.
// A mutex would not do: an RWMutex reader re-entering while Close waits
// deadlocks.
type lifecycle struct {
	refs     atomic.Int64
	closed   atomic.Bool
	signaled atomic.Bool
	drained  chan struct{}
}

func newLifecycle() lifecycle { return lifecycle{drained: make(chan struct{})} }

// enter admits a call, or reports false once the device is closed.
func (l *lifecycle) enter() bool {
	l.refs.Add(1)
	if l.closed.Load() {
		l.leave()
		return false
	}
	return true
}

// leave ends a call admitted by enter (or refused by it).
func (l *lifecycle) leave() {
	if l.refs.Add(-1) == 0 && l.closed.Load() {
		l.signal()
	}
}

// signal releases Close exactly once. Both the last leaver and Close itself
// may find the device idle; the flag keeps the channel from closing twice.
func (l *lifecycle) signal() {
	if l.signaled.CompareAndSwap(false, true) {
		close(l.drained)
	}
}

// close marks the device closed and reports whether this call did it.
func (l *lifecycle) close() bool { return l.closed.CompareAndSwap(false, true) }

// wait returns once no admitted call remains. Call it after close.
func (l *lifecycle) wait() {
	if l.refs.Load() == 0 {
		l.signal()
	}
	<-l.drained
}
