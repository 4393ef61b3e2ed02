//go:build !amd64

package shm

// prefetchWrite does nothing where no prefetch-for-write is wired up
// (see prefetch_amd64.go): the hint is then an empty call, inlined away.
func prefetchWrite(*byte) {}
