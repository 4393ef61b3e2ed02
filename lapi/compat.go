package lapi

import "github.com/weft-hpc/weft/hal"

// PeerErrLocked is PeerErr, which may be called inside the dispatcher too.
//
// Deprecated: use PeerErr. Kept only until mpi's last caller moves.
func (c *Context) PeerErrLocked(peer hal.Rank) error { return c.PeerErr(peer) }
