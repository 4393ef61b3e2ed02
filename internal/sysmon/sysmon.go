package sysmon

import (
	"errors"
	"sync"
	"time"
)

// ErrNotFound means no thread could be told apart as sysmon: Batch then
// changes nothing.
var ErrNotFound = errors.New("sysmon: the Go runtime's monitor thread was not found")

// ErrChosenPolicy means the process was not on the normal policy
// (SCHED_OTHER) when Batch was called: it was started under SCHED_BATCH,
// SCHED_IDLE or a real-time policy, which someone chose, so Batch changes
// nothing.
var ErrChosenPolicy = errors.New("sysmon: the process runs under a scheduling policy chosen for it, left as it is")

// ErrUnsupported means this system has no SCHED_BATCH (not Linux).
var ErrUnsupported = errors.New("sysmon: scheduling policies are Linux's")

var (
	once     sync.Once
	batchTid int
	batchErr error
)

// Batch moves this process's sysmon thread to SCHED_BATCH (see the
// package comment) and returns its thread id. It acts only when the
// process (its main thread and sysmon) is on SCHED_OTHER, else it returns
// ErrChosenPolicy. Only the first call acts; later ones return what it
// did. Once sysmon is moved, a goroutine moves the threads it starts back
// (keep) for the life of the process.
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
// SCHED_BATCH back to the normal policy, every keepEvery, but for those
// already on SCHED_BATCH when Batch acted (see unbatch). A thread the
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
