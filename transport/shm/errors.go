package shm

import (
	"errors"
	"fmt"

	"github.com/weft-hpc/weft/hal"
)

// Sentinel errors of this package; errors wrap them with context, callers
// test with errors.Is.
var (
	// ErrCorrupt: the shared segment failed a check (a marker, a header
	// field, a cell pointing outside its ring). The ring or segment it names
	// is not used again.
	ErrCorrupt = errors.New("shm: shared segment corrupted")
	// ErrMismatch: the segment was made for another job size or geometry
	// (the ranks were given different Options), or by another user; or a
	// peer's address is of another instance of the segment (a restarted
	// rank, or one that came after the others had left).
	ErrMismatch = errors.New("shm: segment does not match this rank's job")
	// ErrNoCMA: cross-memory attach is not available toward this peer (the
	// kernel refused it, Options.NoCMA, or the peer's pid is unknown).
	ErrNoCMA = errors.New("shm: cross-memory attach not available")
)

// Errors returned on paths that must not allocate.
var (
	errClosed   = fmt.Errorf("shm: %w", hal.ErrClosed)
	errRingFull = fmt.Errorf("shm: ring toward the receiver is full: %w", hal.ErrNoResource)
	errShortHdr = fmt.Errorf("shm: header shorter than %d bytes: %w", hal.HeaderLen, hal.ErrBadFrame)
)
