package osyield

import "golang.org/x/sys/unix"

// Yield gives the processor to another runnable thread, if there is one.
// It is a raw system call: sched_yield never blocks, so the runtime need
// not be told (which costs as much again, on every poll of an
// oversubscribed rank).
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
