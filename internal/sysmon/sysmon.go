package sysmon

import (
	"errors"
	"sync"
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
// later ones return what it did.
func Batch() (tid int, err error) {
	once.Do(func() { batchTid, batchErr = batch() })
	return batchTid, batchErr
}
