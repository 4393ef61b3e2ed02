//go:build !amd64

package shm

// prefetchWrite is a no-op where no prefetch-for-write is wired up: the
// hint then costs a call and does nothing (see prefetch_amd64.go).
func prefetchWrite(*byte) {}
