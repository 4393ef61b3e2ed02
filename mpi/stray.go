package mpi

import (
	"encoding/binary"
	"fmt"

	"github.com/weft-hpc/weft/lapi"
)

// Strays. A collective step whose tag names a call this rank has begun,
// but carries another digest (another kind, op or root), is one no receive
// of this rank's will ever meet. Usually some rank is blocked in such a
// call, and agree.go's comparison aborts it on every member; but where the
// ranks that disagree only send (an Ibcast whose ranks each name
// themselves root), every rank finishes the call with its own data and no
// error, and nothing blocks. So a rank that queues such a step as
// unexpected sends its signature of the call to the step's sender (tell),
// saying whether its own part has finished, at its next collective's
// begin or from a goroutine, whichever comes first. The sender compares at
// once, in the handler: where both parts have finished, and no abort of
// the call came, its next collective on the communicator fails with ErrArg
// naming the disagreement (begin; one found more than lateWindow calls
// late is dropped), and that call's abort tells the other members; where
// either part still runs, that part's wait blocks, and its comparison
// aborts the call (agree.go). (An abort of a call every member has left
// would reach them later, in different calls, which may go through the
// shared block.) Steps that come before their call begins here are kept,
// a few, and looked at when it begins.

// earlyStep is a collective step that came before its call began here.
type earlyStep struct {
	k    uint32 // the call's number, as far as the tag carries it (seqMask)
	d    uint8  // the digest the tag carries
	from lapi.Rank
}

// lateWindow is how many calls after a call a disagreement about it may
// still be kept for the next one to report: the report comes at most
// lateWindow+1 calls after the bad call, so that a program sees it near
// the call, and one that goes on after an error is not failed at random
// later. Where the calls go by messages the signature arrives while the
// call after the bad one runs; where they go through the shared block,
// which polls no device, it may come later than that, and then it is not
// reported.
const lateWindow = 2

// maxEarly bounds the early steps a communicator keeps: a disagreement
// among those past it is found only where a wait blocks.
const maxEarly = 64

// strayCheck looks at a collective step queued as unexpected (w.mu and
// lapi's lock held).
func (w *World) strayCheck(a *arrival) {
	if c := w.commByCtx(a.env.ctx &^ 1); c != nil {
		c.coll.step(a.env.tag, a.from)
	}
}

// step looks at a step, tagged tag, that from sent and that waits as
// unexpected.
func (s *collState) step(tag int, from lapi.Rank) {
	tk := uint32(tag>>8) & seqMask
	d := uint8(tag>>digestShift) & digestMask
	if ahead := (tk - s.seq.Load()) & seqMask; ahead != 0 && ahead < seqMask/2 {
		s.mu.Lock()
		if len(s.early) < maxEarly {
			s.early = append(s.early, earlyStep{k: tk, d: d, from: from})
			s.noteStrayWorkLocked()
		}
		s.mu.Unlock()
		return
	}
	k := s.callOf(tag)
	if w0, w1, ok := s.sig(k); ok && sigDigest(w0, w1) != d {
		s.strayed(k, from)
	}
}

// sigDigest is the callDigest of the call a signature describes.
func sigDigest(w0, w1 uint64) uint8 { return callDigest(uint8(w0>>8), sigOp(w0), int(w1&0xffffff)) }

// checkEarly looks at the early steps of call k, which has just begun
// with digest d, and forgets them and any of calls before it.
func (s *collState) checkEarly(k uint32, d uint8) {
	var strays []lapi.Rank
	s.mu.Lock()
	keep := s.early[:0]
	for _, e := range s.early {
		switch {
		case e.k == k&seqMask:
			if e.d != d {
				strays = append(strays, e.from)
			}
		case (e.k-k)&seqMask < seqMask/2:
			keep = append(keep, e) // a later call's
		}
	}
	s.early = keep
	s.noteStrayWorkLocked()
	s.mu.Unlock()
	for _, from := range strays {
		s.strayed(k, from)
	}
}

// strayed records that from sent a step of call k under other arguments:
// from is sent this rank's signature of the call, once per call.
func (s *collState) strayed(k uint32, from lapi.Rank) {
	s.mu.Lock()
	if s.strays == nil {
		s.strays = make(map[uint32]bool)
	}
	first := !s.strays[k]
	if first {
		forgetOld(s.strays, k)
		s.strays[k] = true
		s.tells = append(s.tells, pendingTell{k: k, to: from})
		s.noteStrayWorkLocked()
	}
	s.mu.Unlock()
	if first {
		// Sent by the next collective's begin, or by this goroutine if
		// it runs first (Amsend: not under lapi's lock, where a step
		// is looked at; and a rank in a tight loop of collectives on
		// one processor may not run a goroutine for milliseconds).
		go s.sendTells()
	}
}

// pendingTell is a signature strayed has yet to send.
type pendingTell struct {
	k  uint32
	to lapi.Rank
}

// sendTells sends the signatures strayed asked for.
func (s *collState) sendTells() {
	s.mu.Lock()
	tells := s.tells
	s.tells = nil
	s.noteStrayWorkLocked()
	s.mu.Unlock()
	for _, t := range tells {
		s.tell(t.k, t.to)
	}
}

// forgetOld removes from m, which grows by one call at a time, the calls
// more than sigRing before k.
func forgetOld[V any](m map[uint32]V, k uint32) {
	if len(m) < sigRing {
		return
	}
	for old := range m {
		if int32(k-old) > sigRing {
			delete(m, old)
		}
	}
}

// finished reports whether call k, begun here, is no longer running: a
// blocking call returned, a nonblocking one completed.
func (s *collState) finished(k uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, inFlight := s.held[k]
	return !inFlight && s.running.Load() != k && int32(k-s.seq.Load()) <= 0
}

// setLate keeps the first disagreement found about call k, finished here,
// which the next call reports, unless call k or a later one was aborted
// (that abort told the members: those whose part of the call it failed;
// one whose part only sent may return nil, doc.go), or this rank has
// begun more than lateWindow calls since k.
func (s *collState) setLate(k uint32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.late != nil || int32(s.seq.Load()-k) > lateWindow {
		return
	}
	for a := range s.aborts {
		if int32(a-k) >= 0 {
			return
		}
	}
	s.late, s.lateK = err, k
	s.noteStrayWorkLocked()
}

// takeLate returns, once, the disagreement kept for the next call.
func (s *collState) takeLate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.late
	s.late = nil
	s.noteStrayWorkLocked()
	if err == nil {
		return nil
	}
	return fmt.Errorf("an earlier call on this communicator, finished here, was found to disagree: %w", err)
}

// beginStrays is begin's part when strayWork is set: the early steps of
// call k (digest d) are looked at, the signatures due are sent, and a
// disagreement kept is reported as this call's error.
func (s *collState) beginStrays(k uint32, d uint8) error {
	s.checkEarly(k, d)
	s.sendTells()
	return s.takeLate()
}

// noteStrayWorkLocked sets strayWork from early, tells and late (mu held).
func (s *collState) noteStrayWorkLocked() {
	s.strayWork.Store(len(s.early) > 0 || len(s.tells) > 0 || s.late != nil)
}

// sigTell marks the member of a signature message sent by tell, and
// sigTellDone one whose sender's part of the call had finished.
const (
	sigTell     = 1 << 31
	sigTellDone = 1 << 30
)

// sigMsg is a signature message: context, member (with sigTell if tell,
// and sigTellDone if done), signature.
func (s *collState) sigMsg(w0, w1 uint64, tell, done bool) [agreeLen]byte {
	var b [agreeLen]byte
	le := binary.LittleEndian
	le.PutUint32(b[0:], s.c.ctx)
	member := uint32(s.c.rank)
	if tell {
		member |= sigTell
	}
	if done {
		member |= sigTellDone
	}
	le.PutUint32(b[4:], member)
	le.PutUint64(b[8:], w0)
	le.PutUint64(b[16:], w1)
	return b
}

// tell sends this rank's signature of call k to world rank to, which
// compares it with its own (agreeHandler).
func (s *collState) tell(k uint32, to lapi.Rank) {
	w0, w1, ok := s.sig(k)
	if !ok {
		return
	}
	b := s.sigMsg(w0, w1, true, s.finished(k))
	w := s.c.w
	// A member that cannot be reached fails the call by itself.
	_ = w.lc.Amsend(to, w.hAgree, b[:], nil, lapi.SendOpts{})
	w.agreeSent.Add(1)
}
