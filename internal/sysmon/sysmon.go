package sysmon

import (
	"errors"
	"sync"
	"sync/atomic"
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
	batched  atomic.Int64 // batchTid once Batch has moved it, for Unbatch
)

// Batch moves this process's sysmon thread to SCHED_BATCH (see the
// package comment) and returns its thread id. Only the first call acts;
// later ones return what it did. Once sysmon is moved, a goroutine runs
// Unbatch every KeepEvery for the life of the process.
func Batch() (tid int, err error) {
	once.Do(func() {
		batchTid, batchErr = batch()
		if batchErr == nil {
			batched.Store(int64(batchTid))
			go keep()
		}
	})
	return batchTid, batchErr
}

// KeepEvery is how often the threads sysmon starts are moved back off
// SCHED_BATCH (see Unbatch). A sweep of 20-odd threads takes tens of
// microseconds: once a second it costs a polling rank nothing it would
// notice, and a goroutine on an inherited SCHED_BATCH thread loses its
// wake-up preemption for at most that long.
const KeepEvery = time.Second

// Unbatch moves every thread of this process but sysmon's from
// SCHED_BATCH back to the normal policy, and returns how many it moved;
// before Batch has moved sysmon it does nothing. A thread the monitor
// starts inherits its policy: the runtime clones a new M from the thread
// that asks for one, and sysmon asks when it hands off the processor of a
// goroutine blocked in a system call. With 50 goroutines in blocking
// system calls, 17-21 of a test process's 22-26 threads were on
// SCHED_BATCH, and the goroutines they ran lost wake-up preemption.
func Unbatch() (int, error) {
	tid := batched.Load()
	if tid == 0 {
		return 0, nil
	}
	return unbatch(int(tid))
}

// keep runs Unbatch every KeepEvery. An error (the process's threads
// cannot be listed) ends it: it would come again.
func keep() {
	for {
		time.Sleep(KeepEvery)
		if _, err := Unbatch(); err != nil {
			return
		}
	}
}
