package mpi

import (
	"github.com/weft-hpc/weft/lapi"
)

// Iprobe is Probe that does not block (MPI_Iprobe): it makes progress once
// and reports whether a message from source (or AnySource) with tag (or
// AnyTag) can be received now, and if so describes it as Probe does
// (Count in bytes). The message stays where it is, for a receive. With a
// named source that has failed and no message from it waiting, Iprobe
// returns the failure (ErrPeerFailed) rather than false forever.
func (c *Comm) Iprobe(source, tag int) (found bool, st Status, err error) {
	if c == nil {
		return false, Status{}, errNilComm("Iprobe")
	}
	if err := c.checkSource(source, tag, c.ctx); err != nil {
		return false, Status{}, err
	}
	w := c.w
	if err := w.finalized("iprobe"); err != nil {
		return false, Status{}, err
	}
	w.lc.Progress()
	w.lc.Atomically(func(tx *lapi.Tx) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if a := w.m.probe(c.ctx, source, tag); a != nil {
			found, st = true, Status{Source: a.env.src, Tag: a.env.tag, Count: int(a.env.size)}
		} else if source != AnySource {
			err = tx.PeerErr(lapi.Rank(c.group[source]))
		}
	})
	return found, st, err
}
