// Package osyield gives the processor to another runnable thread of the
// machine (sched_yield), which is how a rank that shares a core with
// another rank lets it run without paying for a sleep and a wake-up.
// runtime.Gosched only yields to goroutines of the same process.
//
// osyield may import the standard library and golang.org/x/sys/unix.
package osyield
