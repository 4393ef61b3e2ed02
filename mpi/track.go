package mpi

import (
	"fmt"
	"strings"

	"github.com/weft-hpc/weft/internal/track"
	"github.com/weft-hpc/weft/lapi"
)

// Resource tracking (Options.Track, WEFT_TRACK): the requests Isend,
// Irecv and the nonblocking collectives return, the windows of NewWin and
// the communicators of Dup and Split are recorded in the world's registry
// (World.trk, internal/track) with the site of the user's call, from
// their creation until Wait or Test settles them, Free frees them; lapi
// records in the same registry its RDMA transfers until they complete and
// the registrations the user makes in its TPT until they are
// deregistered, and Init's shared-memory device its segment until it is
// unmapped. Finalize names every one still live. Off, World.trk is nil:
// each creation and release tests it and does nothing else.

// newTracker is the registry of a world configured by opts: nil when
// tracking is off.
func newTracker(opts Options) *track.Registry {
	if !opts.Track {
		return nil
	}
	return track.New()
}

// trackReq records request r, made by call, in the world's registry
// (tracking on only: the caller tests w.trk).
func (w *World) trackReq(r *request, call string) {
	r.trk = w.trk.Add(call+" request ("+r.peerTag()+")", 1)
}

// peerTag says whom a point-to-point request is with and on which tag,
// in its communicator's ranks: "from rank 1 tag 7", "to rank 0 any tag,
// communicator 2"; for a collective's, "communicator 0".
func (r *request) peerTag() string {
	var b strings.Builder
	if r.ctx&1 == 0 {
		switch {
		case !r.recv:
			fmt.Fprintf(&b, "to rank %d", r.src)
		case r.src == AnySource:
			b.WriteString("from any source")
		default:
			fmt.Fprintf(&b, "from rank %d", r.src)
		}
		if r.tag == AnyTag {
			b.WriteString(" any tag")
		} else {
			fmt.Fprintf(&b, " tag %d", r.tag)
		}
		if r.ctx == 0 {
			return b.String()
		}
		b.WriteString(", ")
	}
	fmt.Fprintf(&b, "communicator %d", r.ctx/2)
	return b.String()
}

// postedLeft counts the receives still posted on point-to-point
// contexts: once Finalize's barrier has returned, each is an Irecv no
// Wait or Test saw complete (a blocking receive has returned, and the
// collectives' receives are on the odd contexts).
func (w *World) postedLeft() int {
	n := 0
	w.lc.Atomically(func(*lapi.Tx) {
		for r := w.m.posted.head; r != nil; r = r.next {
			if r.ctx&1 == 0 {
				n++
			}
		}
	})
	return n
}

// leakReport is what Finalize says of the resources still live: with
// tracking on, each with its site; off, the count of requests never
// waited for that the posted receives, the request table and the
// nonblocking collectives know of (leaks): not an Isend copied or an
// Irecv matched and never waited for. "" when there are none.
func (w *World) leakReport(leaks int) string {
	if w.trk != nil {
		return track.Report(w.trk.Leaks())
	}
	if leaks > 0 {
		return fmt.Sprintf("%d requests still outstanding (never waited for; WEFT_TRACK=1 names them and where they were made)", leaks)
	}
	return ""
}
