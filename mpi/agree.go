package mpi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weft-hpc/weft/lapi"
)

// Ranks that disagree about a collective (different lengths, roots or
// ops) must all get an error naming the disagreement, never wrong data and
// never a hang. Four mechanisms see to it, none of which costs a message
// while the ranks agree:
//
//   - A collective's receive takes exactly the bytes this rank expects: a
//     shorter or longer message fails it with ErrArg (cwait).
//   - A collective that fails on one rank fails on all: the rank sends the
//     error to every member (an abort of that call), which fails their
//     operations of the call, or the call itself when they begin it. Every
//     collective message's tag carries the call's number, so that what an
//     aborted call left behind (ranks that disagree may have chosen
//     different algorithms) never matches a later call, and a digest of
//     its kind, op and root, so that ranks that disagree on those never
//     match each other's steps (a shared-memory collective's parts carry
//     the digest too): they wait, and the next mechanism tells them why.
//   - Ranks that chose different algorithms may wait for messages that
//     never come. A collective wait that has blocked for agreeAfter sends
//     this rank's signature of the call (kind, bytes, root, op) to member
//     0 (member 0's goes to every other), which compares it with its own
//     for the same call (the n-th collective on the communicator) and
//     aborts on a difference.
//   - Ranks that disagree but only send block nowhere. A step that
//     arrives for a call begun here under another digest makes this rank
//     send its signature to the step's sender (stray.go).

// agreeAfter is how long a collective wait blocks before this rank asks
// the others whether they agree on the call: long enough that a wait for a
// rank that is computing costs a message per member rarely, short enough
// that a mismatch is reported at once to a person.
const agreeAfter = 100 * time.Millisecond

// Collective kinds in a signature.
const (
	collBarrier uint8 = iota + 1
	collBcast
	collReduce
	collAllreduce
	collGather
	collScatter
	collAllgather
	collAlltoall
	collScan
	collExscan
	collReduceScatterBlock
	collGatherv
	collScatterv
	collAllgatherv
	collAlltoallv
	collIbarrier
	collIbcast
	collIreduce
	collIallreduce
	collIgather
	collIscatter
	collIallgather
	collIalltoall
)

var collNames = [...]string{"", "Barrier", "Bcast", "Reduce", "Allreduce", "Gather", "Scatter", "Allgather", "Alltoall",
	"Scan", "Exscan", "ReduceScatterBlock", "Gatherv", "Scatterv", "Allgatherv", "Alltoallv",
	"Ibarrier", "Ibcast", "Ireduce", "Iallreduce", "Igather", "Iscatter", "Iallgather", "Ialltoall"}

// sigRing is how many recent calls' signatures a communicator keeps, to
// answer a member that asks about a call this rank has finished.
const sigRing = 16

// collState is a communicator's record of its collectives, and the
// agreement between its members about them: it compares signatures and
// asks about a blocked call (the sub-communicators of a hierarchical
// collective share their parent's, hier.go).
type collState struct {
	// c is the communicator whose members the signatures and aborts go
	// to: the one that made this record.
	c   *Comm
	seq atomic.Uint32 // collectives begun; only the caller's goroutine adds
	// digest is the running call's callDigest (begin's).
	digest atomic.Uint32
	// ring holds the signatures of the last sigRing calls, by seq: word 0
	// is seq<<32|kind<<8|op, word 1 is bytes<<24|root. A reader loads
	// word 0 before and after word 1 (the writer clears it first).
	ring [sigRing][2]atomic.Uint64

	mu       sync.Mutex
	pending  []sigCheck       // members' signatures of calls not begun here
	npending atomic.Int32     // len(pending), read without mu on each call
	aborts   map[uint32]error // aborted calls, by number (mu)
	naborts  atomic.Int32     // len(aborts), read without mu on each call
	// shFrom is the first call that goes by messages, not through the
	// shared block (0: none): call shFrom-1 was aborted, and the block's
	// rounds may be out of step. Every member hears every abort and the
	// lowest holds (mu for writes), so that every member switches at the
	// same call.
	shFrom atomic.Uint32
	// held keeps the signatures of nonblocking calls still in flight
	// once the ring has moved past them (mu): a rank waiting for one
	// after sigRing more calls would otherwise have none to compare.
	held map[uint32][2]uint64
	// inflight counts nonblocking calls posted and not complete (mu);
	// unlinkIdle says Free came while some were: the communicator stays
	// findable by its context, for the aborts and signatures of those
	// calls, until the last completes (release).
	inflight   int
	unlinkIdle bool
	// callShOff is whether the running call goes by messages (shFrom
	// as it began, or byMessages), which its signature carries: a call
	// whose steps decide one by one whether to go through the block (a
	// hierarchical one, hier.go) decides as its signature says, whenever
	// an abort of an earlier call comes. Only the caller's goroutine
	// reads or writes it.
	callShOff bool
	// running is the call begun last while it runs here, as a blocking
	// call or until a nonblocking one is held (0: none).
	running atomic.Uint32
	// early, strays, tells and late are stray.go's (mu): steps that
	// came before their call began here, calls of which a stray step
	// came, signatures to send about them, and the disagreement the next
	// call reports.
	early  []earlyStep
	strays map[uint32]bool
	tells  []pendingTell // signatures strayed has yet to send
	late   error
	lateK  uint32 // the call late is about
	// strayWork says early, tells or late is set, for begin to look at
	// without mu.
	strayWork atomic.Bool
	asked     atomic.Uint32 // the last call whose signature went out
	blocked   atomic.Uint32 // the call a wait of which is blocked now; 0: none
	since     atomic.Int64  // when that wait blocked (sinceStart)
	armed     atomic.Bool   // timer is running
	timer     *time.Timer   // fires agreeAfter after a wait first blocks
}

// A collective step's tag carries, above the step's kind (8 bits), the
// call's number (seqMask's bits: calls in flight are never that many
// apart) and above it the call's digest (callDigest), so that the steps
// of ranks that disagree on the op or the root never match: a wrong op
// would otherwise reduce without a wait, and give every rank its own
// wrong result; now the wait blocks, and after agreeAfter the signatures
// say why.
const (
	seqMask     = 1<<17 - 1
	digestShift = 8 + 17
	digestMask  = 1<<6 - 1
)

// ctag is the tag of a collective step of kind tag in the running call.
func (c *Comm) ctag(tag int) int {
	return tag | callTag(c.coll.seq.Load(), uint8(c.coll.digest.Load()))
}

// callTag is what the tags of call k's steps carry above their kind; d is
// the call's digest.
func callTag(k uint32, d uint8) int { return int(k&seqMask)<<8 | int(d&digestMask)<<digestShift }

// callDigest digests what the members of a call must agree on besides its
// size (which a receive checks exactly): its kind, its op (agreedOp) and
// its root (as far as a signature keeps it, so that sigDigest agrees).
func callDigest(kind uint8, op Op, root int) uint8 {
	x := uint32(kind)*0x9e3779b1 ^ uint32(agreedOp(op))*0x85ebca77 ^ uint32(root&0xffffff)*0xc2b2ae3d
	x ^= x >> 15
	x *= 0x2c1b3c6d
	x ^= x >> 12
	return uint8(x & digestMask)
}

// callOf is the call whose step's tag is tag: the latest call begun whose
// number agrees with the tag's bits (a nonblocking call may be older than
// the running one).
func (s *collState) callOf(tag int) uint32 {
	k := s.seq.Load()
	return k - (k-uint32(tag>>8))&seqMask
}

// sigCheck is a member's signature of call seq.
type sigCheck struct {
	from   int // member
	seq    uint32
	w0, w1 uint64
	// tell says the member sent it on a stray step (stray.go), not from
	// a blocked wait, and tellDone that its part of the call had finished
	// then: a difference with a call finished at both is kept for the
	// next call rather than sent as an abort.
	tell, tellDone bool
}

// sigShOff marks a signature of a rank whose collectives no longer go
// through the shared block (after an abort): members that differ in it
// would take different algorithms.
const sigShOff = 1 << 16

// A signature's op: its low 8 bits below the kind, the next 15 above
// sigShOff (ops NewOp made are numbered from 16 on).
const sigOpHigh = 17

// agreedOp is what members compare of op (callDigest, packSig): a user
// op is firstUserOp, whatever its number, which is local to its process,
// so ranks that name one op by different numbers agree, and ranks with
// different user ops are not told apart.
func agreedOp(op Op) Op { return min(op, firstUserOp) }

// packSig packs a member's signature of call seq, its op as agreedOp.
func packSig(seq uint32, kind uint8, op Op, root, n int, shOff bool) (uint64, uint64) {
	op = agreedOp(op)
	w0 := uint64(seq)<<32 | uint64(kind)<<8 | uint64(uint8(op)) | uint64(op>>8&0x7fff)<<sigOpHigh
	if shOff {
		w0 |= sigShOff
	}
	return w0, uint64(n)<<24 | uint64(root)&0xffffff
}

// sigOp is the op a signature names.
func sigOp(w0 uint64) Op { return Op(uint8(w0)) | Op(w0>>sigOpHigh&0x7fff)<<8 }

// describeSig says what a signature is, for an error.
func describeSig(w0, w1 uint64) string {
	kind, n, root := uint8(w0>>8), w1>>24, int(w1&0xffffff)
	var op any = sigOp(w0)
	if sigOp(w0) >= firstUserOp {
		op = "a user op" // packSig keeps no number of one
	}
	name := "collective"
	if int(kind) < len(collNames) {
		name = collNames[kind]
	}
	if w0&sigShOff != 0 {
		name += " (by messages after an abort)"
	}
	switch kind {
	case collBarrier:
		return name
	case collBcast, collGather, collScatter, collIbcast, collIgather, collIscatter:
		return fmt.Sprintf("%s of %d bytes from root %d", name, n, root)
	case collReduce, collIreduce:
		return fmt.Sprintf("%s (%v) of %d bytes to root %d", name, op, n, root)
	case collAllreduce, collScan, collExscan, collIallreduce:
		return fmt.Sprintf("%s (%v) of %d bytes", name, op, n)
	case collReduceScatterBlock:
		return fmt.Sprintf("%s (%v) of %d bytes per rank", name, op, n)
	case collGatherv, collScatterv:
		return fmt.Sprintf("%s from root %d", name, root)
	case collAllgatherv:
		return fmt.Sprintf("%s of %d bytes in all", name, n)
	case collAlltoallv:
		return name
	}
	return fmt.Sprintf("%s of %d bytes", name, n)
}

// begin starts collective kind on c with n bytes per rank (as this rank
// sees it): it records the call's signature and compares it with what
// members sent about it already. It fails if the call was aborted by a
// member already, or the world is finalized.
func (c *Comm) begin(kind uint8, op Op, root, n int) error {
	if c.w.closed.Load() {
		return ErrFinalized
	}
	if c.freed {
		return c.freedErr()
	}
	s := c.coll
	k := s.seq.Load() + 1
	s.callShOff = s.offAt(k)
	w0, w1 := packSig(k, kind, op, root, n, s.callShOff)
	slot := &s.ring[k%sigRing]
	slot[0].Store(0)
	slot[1].Store(w1)
	slot[0].Store(w0)
	d := callDigest(kind, op, root)
	s.digest.Store(uint32(d))
	s.running.Store(k)
	s.seq.Store(k)
	if s.strayWork.Load() {
		if err := s.beginStrays(k, d); err != nil {
			return err
		}
	}
	if s.naborts.Load() != 0 {
		if err := s.abortOf(k); err != nil {
			return err
		}
	}
	if s.npending.Load() != 0 {
		return s.comparePending()
	}
	return nil
}

// collective runs body as collective call kind of n bytes per rank (as
// this rank sees it) between begin and end, naming the call (name) in its
// error.
func (c *Comm) collective(name string, kind uint8, op Op, root, n int, body func() error) error {
	err := c.begin(kind, op, root, n)
	if err == nil {
		err = body()
		if c.hier == nil && errors.Is(err, errByMessages) {
			// The call began in the shared block before this rank heard
			// that it goes by messages, and waited for a member that
			// knew (which never stamps the round): nothing of it is
			// written yet (the block's output comes after its waits).
			// A hierarchical call's steps by messages may have gone: it
			// fails instead (ErrArg), and the members with it.
			c.coll.byMessages()
			err = body()
		}
	}
	c.coll.running.Store(0)
	if err = c.end(err); err != nil {
		return fmt.Errorf("mpi: %s: %w", name, err)
	}
	return nil
}

// errByMessages ends a wait in the shared block of a call that goes by
// messages (collState.shFrom): the members that know it never stamp the
// round, so the call is run again by messages (collective).
var errByMessages = fmt.Errorf("the call began through shared memory before this rank heard that it goes by messages after an abort: %w", ErrArg)

// offAt reports whether call k goes by messages, not through the shared
// block: an abort named k or an earlier call the first to.
func (s *collState) offAt(k uint32) bool {
	from := s.shFrom.Load()
	return from != 0 && int32(k-from) >= 0
}

// byMessages turns the running call, begun for the shared block, to
// messages, and its signature with it.
func (s *collState) byMessages() {
	s.callShOff = true
	k := s.seq.Load()
	slot := &s.ring[k%sigRing]
	if w0 := slot[0].Load(); w0>>32 == uint64(k) {
		w1 := slot[1].Load()
		slot[0].Store(0)
		slot[1].Store(w1)
		slot[0].Store(w0 | sigShOff)
	}
}

// end finishes a collective: an error is sent to every member as the
// call's abort (unless the call was aborted already, or this rank is
// finalized and can send nothing), so that none of them waits for this
// rank in vain.
func (c *Comm) end(err error) error {
	if err == nil || c.size == 1 || errors.Is(err, ErrFinalized) {
		return err
	}
	if k := c.coll.seq.Load(); c.coll.abortOf(k) == nil {
		// The members' errors wrap the cause's sentinel again (aborted).
		cause := abortCause(err)
		msg := strings.TrimSuffix(fmt.Sprintf("rank %d: %v", c.rank, err), ": "+causeSentinel(cause).Error())
		c.coll.abort(k, cause, msg)
	}
	return err
}

// abortOf is the error call k was aborted with, or nil.
func (s *collState) abortOf(k uint32) error {
	if s.naborts.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborts[k]
}

// abortedLocked is the abort of the call a step tagged tag belongs to
// when ctx is c's collective context (lapi's lock held: an abort that
// comes later finds what is being posted under it, so either sees the
// other).
func (s *collState) abortedLocked(ctx uint32, tag int) error {
	if ctx&1 == 0 || s.naborts.Load() == 0 {
		return nil
	}
	return s.abortOf(s.callOf(tag))
}

// abortedNow reports, for a wait's condition, the abort of the running
// call (one atomic load until any call was aborted). It looks the call up
// rather than comparing it with the last abort heard: aborts of different
// calls come from different goroutines of a member and can arrive in
// either order.
func (s *collState) abortedNow() error {
	return s.abortOf(s.seq.Load())
}

// sig returns this rank's signature of call k, if it is still kept.
func (s *collState) sig(k uint32) (w0, w1 uint64, ok bool) {
	slot := &s.ring[k%sigRing]
	w0 = slot[0].Load()
	w1 = slot[1].Load()
	if w0>>32 != uint64(k) || slot[0].Load() != w0 {
		s.mu.Lock()
		h, ok := s.held[k]
		s.mu.Unlock()
		return h[0], h[1], ok
	}
	return w0, w1, true
}

// hold keeps call k's signature, a nonblocking call's that has begun
// last, until release: its Request may be waited for long after. From
// here the call counts as running by being held, not by running.
func (s *collState) hold(k uint32) {
	w0, w1, ok := s.sig(k)
	s.mu.Lock()
	s.inflight++
	if ok {
		if s.held == nil {
			s.held = make(map[uint32][2]uint64)
		}
		s.held[k] = [2]uint64{w0, w1}
	}
	s.running.Store(0)
	s.mu.Unlock()
}

// release forgets what hold kept of call k, which completed; the last
// in flight on a communicator freed meanwhile unlinks it.
func (s *collState) release(k uint32) {
	s.mu.Lock()
	delete(s.held, k)
	s.inflight--
	unlink := s.inflight == 0 && s.unlinkIdle
	s.unlinkIdle = s.unlinkIdle && !unlink
	s.mu.Unlock()
	if unlink {
		s.c.unlink()
	}
}

// freeing reports whether nonblocking calls are in flight on the
// communicator being freed, which then stays linked until the last one
// completes.
func (s *collState) freeing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlinkIdle = s.inflight > 0
	return s.unlinkIdle
}

// compare checks a member's signature of call k against this rank's, and
// aborts the communicator's collectives on a difference.
func (s *collState) compare(chk sigCheck) error {
	c := s.c
	w0, w1, ok := s.sig(chk.seq)
	if !ok || w0 == chk.w0 && w1 == chk.w1 || s.switching(chk.seq, w0, w1, chk) {
		return nil
	}
	msg := fmt.Sprintf("ranks disagree on collective #%d: rank %d calls %s, rank %d calls %s",
		chk.seq, chk.from, describeSig(chk.w0, chk.w1), c.rank, describeSig(w0, w1))
	if chk.tell {
		// Where both parts finished, an abort would come to members long
		// past the call, which go on through the shared block: the next
		// call fails instead, and its abort tells them (stray.go). Where
		// either part still runs, its wait blocks, asks and aborts.
		if chk.tellDone && s.finished(chk.seq) {
			s.setLate(chk.seq, fmt.Errorf("%s: %w", msg, ErrArg))
		}
		return nil
	}
	s.abort(chk.seq, causeArg, msg)
	return s.abortOf(chk.seq)
}

// switching reports whether this rank's signature of call k (w0, w1)
// and a member's differ only in whether the call goes by messages, and
// the one that does not yet will: the call is at or after the first by
// messages (shFrom), which the other hears of too, and the rank that
// began it for the shared block is in it still (the member asked while
// blocked in it; this rank runs it), so its wait ends and it runs the
// call again by messages (errByMessages). A hierarchical call is not run
// again: they differ.
func (s *collState) switching(k uint32, w0, w1 uint64, chk sigCheck) bool {
	if w1 != chk.w1 || w0^chk.w0 != sigShOff || !s.offAt(k) || s.c.hier != nil {
		return false
	}
	return w0&sigShOff != 0 || s.seq.Load() == k
}

// comparePending compares the signatures members sent about calls this
// rank has now begun, and returns the abort of the running call if one
// of them caused it (an earlier call's is that call's business).
func (s *collState) comparePending() error {
	now := s.seq.Load()
	s.mu.Lock()
	var due []sigCheck
	keep := s.pending[:0]
	for _, chk := range s.pending {
		if int32(chk.seq-now) <= 0 {
			due = append(due, chk)
		} else {
			keep = append(keep, chk)
		}
	}
	s.pending = keep
	s.npending.Store(int32(len(keep)))
	s.mu.Unlock()
	for _, chk := range due {
		if err := s.compare(chk); err != nil && chk.seq == now {
			return err
		}
	}
	return nil
}

// watch marks a collective wait that has just stopped spinning: the timer
// then sends this rank's signature of the running call to every member,
// at most agreeAfter after the wait blocked, if it is still blocked. The
// timer is not stopped when the wait ends: it finds no wait blocked, so a
// stream of short blocked waits costs an atomic store each, not a timer's
// reset, and asks at most once per agreeAfter.
func (s *collState) watch() { s.watchCall(s.seq.Load()) }

// watchCall is watch for a wait of call k, which may be a nonblocking
// call older than the running one.
func (s *collState) watchCall(k uint32) {
	if s.c.size == 1 {
		return
	}
	s.since.Store(int64(time.Since(sinceStart)))
	s.blocked.Store(k)
	if !s.armed.Swap(true) {
		s.timer.Reset(agreeAfter)
	}
}

// sinceStart is the origin of collState.since: a monotonic clock.
var sinceStart = time.Now()

// unwatch marks the wait ended.
func (s *collState) unwatch() { s.blocked.Store(0) }

// tick is the timer: a wait blocked for agreeAfter asks about its call;
// one blocked for less has the timer run again when it will have been.
func (s *collState) tick() {
	s.armed.Store(false) // then look: a watch after this arms anew
	k := s.blocked.Load()
	if k == 0 {
		return
	}
	if left := agreeAfter - (time.Since(sinceStart) - time.Duration(s.since.Load())); left > 0 {
		if !s.armed.Swap(true) {
			s.timer.Reset(left)
		}
		return
	}
	s.ask(k)
}

// ask sends this rank's signature of call k, once: to member 0, which
// compares every member's with its own, or from member 0 to every other
// (so that p blocked ranks cost O(p) messages, not p²).
func (s *collState) ask(k uint32) {
	c := s.c
	w0, w1, ok := s.sig(k)
	if !ok || s.asked.Swap(k) == k {
		return
	}
	b := s.sigMsg(w0, w1, false, false)
	w := c.w
	for m, wr := range c.group {
		if m != c.rank && (c.rank == 0 || m == 0) {
			// A member that cannot be reached fails the call by itself.
			_ = w.lc.Amsend(lapi.Rank(wr), w.hAgree, b[:], nil, lapi.SendOpts{})
			w.agreeSent.Add(1)
		}
	}
}

// agreeLen is the size of a signature message: context, member, signature.
const agreeLen = 24

// abortCauses are the sentinels an abort carries from the rank whose
// call failed, by their number in the abort message, so that every
// member's error wraps the cause (errors.Is): a peer's failure stays
// ErrPeerFailed, and a timeout ErrTimeout, at the members that hear of it
// by the abort. Any other error (arguments that disagree, the usual
// cause, a truncation or a bad rank, which are disagreements too from the
// others' side) goes as ErrArg.
var abortCauses = [...]error{causeArg: ErrArg, causePeerFailed: ErrPeerFailed, causeTimeout: ErrTimeout}

// Causes of an abort, indexes in abortCauses.
const (
	causeArg uint8 = iota
	causePeerFailed
	causeTimeout
)

// abortCause is the cause an abort for err carries.
func abortCause(err error) uint8 {
	for i := causePeerFailed; int(i) < len(abortCauses); i++ {
		if errors.Is(err, abortCauses[i]) {
			return i
		}
	}
	return causeArg
}

// causeSentinel is the sentinel an abort's cause stands for: ErrArg for
// a cause this rank does not know.
func causeSentinel(cause uint8) error {
	if int(cause) < len(abortCauses) {
		return abortCauses[cause]
	}
	return ErrArg
}

// abort ends call k with msg and cause (an index in abortCauses): every
// member is told, and this rank's operations of the call fail.
func (s *collState) abort(k uint32, cause uint8, msg string) {
	c := s.c
	w := c.w
	msg = msg[:min(len(msg), lapi.MaxUhdr-abortHdrLen)]
	b := make([]byte, abortHdrLen+len(msg))
	le := binary.LittleEndian
	le.PutUint32(b[0:], c.ctx)
	le.PutUint32(b[4:], k)
	b[8] = cause
	copy(b[abortHdrLen:], msg)
	for m, wr := range c.group {
		if m != c.rank {
			_ = w.lc.Amsend(lapi.Rank(wr), w.hAbort, b, nil, lapi.SendOpts{})
		}
	}
	w.lc.Atomically(func(*lapi.Tx) { s.aborted(k, cause, msg) })
	// A wait of this rank's on the call may be asleep in the device (the
	// abort came from a goroutine of its own, comparing signatures): no
	// frame will wake it, so this does.
	w.lc.Wake()
}

// abortHdrLen is the size of an abort message's header: context, call,
// cause; the message follows.
const abortHdrLen = 9

// aborted records call k's abort and fails this rank's operations of it
// with an error wrapping the cause's sentinel (ErrArg for a cause this
// rank does not know) (lapi's lock held, which the matcher's queues are
// under).
func (s *collState) aborted(k uint32, cause uint8, msg string) {
	err := fmt.Errorf("collective #%d aborted: %s: %w", k, msg, causeSentinel(cause))
	s.mu.Lock()
	if s.aborts == nil {
		s.aborts = make(map[uint32]error)
	}
	if _, ok := s.aborts[k]; ok {
		s.mu.Unlock()
		return
	}
	forgetOld(s.aborts, k) // keep the recent ones
	s.aborts[k] = err
	s.naborts.Store(int32(len(s.aborts)))
	if s.late != nil && int32(k-s.lateK) >= 0 {
		// This abort tells the members: a disagreement kept about call
		// k or an earlier one is not reported (stray.go).
		s.late = nil
		s.noteStrayWorkLocked()
	}
	// Ranks that disagreed may have taken the shared block in different
	// calls, leaving its rounds out of step: from call k+1 on this
	// rank's collectives go by messages, whose tags name the call. Every
	// member hears every abort, so the lowest is every member's; a call
	// begun in the block before this rank heard is run again by
	// messages (errByMessages).
	if from, cur := k+1, s.shFrom.Load(); from != 0 && (cur == 0 || int32(from-cur) < 0) {
		s.shFrom.Store(from)
	}
	s.mu.Unlock()
	// The call's steps: on the communicator's collective context, or on
	// one of its sub-communicators', which share its collState (hier.go).
	w := s.c.w
	ours := func(r *request) bool {
		return r.ctx&1 != 0 && r.comm != nil && r.comm.coll == s && uint32(r.tag>>8)&seqMask == k&seqMask
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var failed []*request
	w.m.posted.take(func(r *request) bool {
		if ours(r) {
			failed = append(failed, r)
		}
		return false
	})
	for _, r := range failed {
		w.m.cancelPosted(r)
		r.finish(Status{}, err)
	}
	w.reqs.each(func(r *request) {
		if ours(r) {
			if r.recv {
				w.endSplit(r)
			}
			r.finish(Status{}, err)
		}
	})
}

// commByCtx finds this rank's communicator with context ctx.
func (w *World) commByCtx(ctx uint32) *Comm {
	w.commsMu.Lock()
	defer w.commsMu.Unlock()
	return w.comms[ctx]
}

// agreeHandler takes a member's signature of a call.
type agreeHandler struct{ w *World }

func (h agreeHandler) OnHeader(src lapi.Rank, uhdr []byte, _ int) ([]byte, any) {
	if len(uhdr) != agreeLen {
		return nil, nil
	}
	le := binary.LittleEndian
	c := h.w.commByCtx(le.Uint32(uhdr[0:]))
	if c == nil {
		return nil, nil
	}
	member := le.Uint32(uhdr[4:])
	chk := sigCheck{from: int(member &^ (sigTell | sigTellDone)), w0: le.Uint64(uhdr[8:]), w1: le.Uint64(uhdr[16:]),
		tell: member&sigTell != 0, tellDone: member&sigTellDone != 0}
	chk.seq = uint32(chk.w0 >> 32)
	s := c.coll
	if chk.tell {
		// A stray's: its comparison sends nothing (stray.go), so it is
		// made now, not by a goroutine, which a rank in a tight loop of
		// collectives on one processor may not run for milliseconds.
		// (One about a call not begun here cannot come: the member had
		// this rank's step of it.)
		if int32(chk.seq-s.seq.Load()) <= 0 {
			_ = s.compare(chk)
		}
		return nil, nil
	}
	// Compared here if this rank has begun the call; else kept for begin.
	// The store and the second look pair with begin's store of seq and
	// its look at npending, so that one of the two always compares.
	s.mu.Lock()
	s.pending = append(s.pending, chk)
	s.npending.Store(int32(len(s.pending)))
	s.mu.Unlock()
	if int32(chk.seq-s.seq.Load()) <= 0 {
		// Aborting sends messages: not from inside the progress engine.
		go s.comparePending()
	}
	return nil, nil
}

func (agreeHandler) OnComplete(lapi.Rank, any) {}

// abortHandler takes a member's abort of a communicator's collectives.
type abortHandler struct{ w *World }

func (h abortHandler) OnHeader(_ lapi.Rank, uhdr []byte, _ int) ([]byte, any) {
	if len(uhdr) < abortHdrLen {
		return nil, nil
	}
	le := binary.LittleEndian
	ctx, k, cause, msg := le.Uint32(uhdr), le.Uint32(uhdr[4:]), uhdr[8], string(uhdr[abortHdrLen:])
	if c := h.w.commOrKeep(ctx, pendingAbort{k: k, cause: cause, msg: msg}); c != nil {
		c.coll.aborted(k, cause, msg)
	}
	return nil, nil
}

// pendingAbort is an abort of a communicator this rank has not made yet
// (a faster member began a call on it, failed and aborted before this
// rank's Dup or Split returned): newComm applies it.
type pendingAbort struct {
	k     uint32
	cause uint8
	msg   string
}

// maxPendingAborts bounds the aborts kept for communicators not made
// here: those of a communicator that was freed here are never used
// (context ids are never reused) and go first.
const maxPendingAborts = 256

// commOrKeep returns the communicator of context ctx, or keeps a for the
// communicator when it is made here and returns nil.
func (w *World) commOrKeep(ctx uint32, a pendingAbort) *Comm {
	w.commsMu.Lock()
	defer w.commsMu.Unlock()
	if c := w.comms[ctx]; c != nil {
		return c
	}
	if w.pendingAborts == nil {
		w.pendingAborts = make(map[uint32][]pendingAbort)
	}
	if len(w.pendingAborts) >= maxPendingAborts {
		lowest := ctx
		for c := range w.pendingAborts {
			lowest = min(lowest, c)
		}
		delete(w.pendingAborts, lowest)
	}
	if l := w.pendingAborts[ctx]; len(l) < sigRing {
		w.pendingAborts[ctx] = append(l, a)
	}
	return nil
}

func (abortHandler) OnComplete(lapi.Rank, any) {}

// mismatch is the error of a collective receive that got n bytes from
// member src where this rank expected want.
func (c *Comm) mismatch(src, n, want int, err error) error {
	if errors.Is(err, ErrTruncate) {
		return fmt.Errorf("ranks disagree: rank %d sent more than the %d bytes rank %d expects (%v): %w", src, want, c.rank, err, ErrArg)
	}
	return fmt.Errorf("ranks disagree: rank %d sent %d bytes, rank %d expects %d: %w", src, n, c.rank, want, ErrArg)
}
