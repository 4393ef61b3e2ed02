//go:build !linux

package osyield

import "runtime"

// Yield gives the processor to another goroutine (no portable way to
// yield the thread here).
func Yield() { runtime.Gosched() }
