package sysmon

import (
	"errors"
	"sync"
	"time"
)

// ErrNotFound means no thread could be told apart as sysmon: Batch then
// changes nothing.
var ErrNotFound = errors.New("sysmon: the Go runtime's monitor thread was not found")

// ErrUnsupported means this system has no SCHED_BATCH (not Linux).
var ErrUnsupported = errors.New("sysmon: scheduling policies are Linux's")

var (
	once     sync.Once
	batchTid int
	batchErr error
)

// Batch moves this process's sysmon thread to SCHED_BATCH (see the
// package comment) and returns its thread id. Only the first call acts;
// later ones return what it did. Once sysmon is moved, a goroutine moves
// the threads it starts back (keep) for the life of the process.
func Batch() (tid int, err error) {
	once.Do(func() {
		batchTid, batchErr = batch()
		if batchErr == nil {
			go keep(batchTid)
		}
	})
	return batchTid, batchErr
}

// keepEvery is how often keep runs unbatch: a sweep takes tens of
// microseconds (bench/results/sysmon.md), so once a second it costs a
// polling rank nothing it would notice, and a goroutine on an inherited
// SCHED_BATCH thread loses its wake-up preemption for at most that long.
const keepEvery = time.Second

// keep moves every thread of this process but sysmon's (tid) that is on
// SCHED_BATCH back to the normal policy, every keepEvery. A thread the
// monitor starts inherits its policy: the runtime clones a new M from the
// thread that asks for one, and sysmon asks when it hands off the
// processor of a goroutine blocked in a system call. With 50 goroutines
// in blocking system calls, 17-21 of a test process's 22-26 threads were
// on SCHED_BATCH, and the goroutines they ran lost wake-up preemption.
// An error (the process's threads cannot be listed) ends it: it would
// come again.
func keep(tid int) {
	for {
		time.Sleep(keepEvery)
		if _, err := unbatch(tid); err != nil {
			return
		}
	}
}
