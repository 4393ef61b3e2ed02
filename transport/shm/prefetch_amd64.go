package shm

// prefetchWrite asks the processor to bring the line at p into this
// core's cache for writing (PREFETCHW), invalidating other cores' copies,
// without waiting for it and without faulting, whatever p is.
//
//go:noescape
func prefetchWrite(p *byte)
