package mpi

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/weft-hpc/weft/lapi"
)

// Shared-memory collectives. When the device maps one block of memory in
// every rank (hal.SharedMemory: the shm device's segment, or mpi.Run's
// goroutines), the small collectives of a communicator go through it:
// each member writes its part into a slot of its own and stamps the slot
// with the collective's round number, and the others wait for the stamps
// and read the parts. A round costs a store and a few loads of lines
// other cores wrote, where messages cost a frame per pair and a wait per
// step. With more ranks than cores that matters most: a collective made
// of log2(n) exchanges, each waiting for the next rank to be scheduled,
// becomes one round each rank joins when it runs (figures in doc.go).
//
// A member's round number counts the shared collectives it has started
// on the communicator, the same sequence at every member (MPI has every
// member call the collectives in the same order). Each member has two
// slots and uses slot k&1 in round k; before overwriting one it makes
// sure every member has started round k-1, and so has finished reading
// round k-2, the slot's last use. A member about to block (lapi wakes a
// blocked rank only for frames) sets its sleep word first, and a member
// that stamps a slot sends a nudge, an empty message, to every member
// whose sleep word is set.
//
// The block, per communicator area (context id / 2, the world's is 0), and
// share (the world rank, or when the job spans nodes and the block is the
// node's, the rank's place among the node's ranks, size of them):
//
//	sleep words: a u32 per area and share, at 4*(area*size + share)
//	members' parts, at partsOff + (area*size + share)*shPart (partsOff:
//	the sleep words rounded up to 128 bytes):
//	  slot 0, slot 1, shSlotStride apart: stamp u32, length u32, data
//
// What goes through the block overtakes the frames sent before it: a PVO
// sent through it could reach a peer before the TPT update lapi sends
// ahead of its owner's frames, and the peer's reads would go by packets
// rather than by cross-memory attach until the update came (direct.go
// exchanges its PVOs by message for that).
//
// A wait that fails (a member failed, WEFT_TIMEOUT) leaves the members'
// rounds out of step, so the communicator's later shared collectives fail
// with that error too. Members must pass the sizes MPI says they must:
// within a slot, a member whose size differs gets ErrArg; sizes on both
// sides of shSlot (or WEFT_SHMCOLL set differently) pick different
// algorithms, and the call waits until WEFT_TIMEOUT.
//
// Context ids are never reused by a rank, and two communicators with the
// same id have no member in common, so a member's part of an area belongs
// to one communicator for the life of the job. (A communicator that spans
// nodes has no shared collectives; its area goes to its node's part,
// hier.go, whose members are some of its own.)
const (
	// shSlot is the most data a slot holds: larger collectives use
	// messages.
	shSlot = 2048
	// shSlotStride keeps a slot's stamp and first 56 bytes on one line
	// and the two slots on different pairs of lines (adjacent-line
	// prefetchers move lines in pairs).
	shSlotStride = (8 + shSlot + 127) &^ 127
	shPart       = 2 * shSlotStride
	// shMembers is the largest communicator that uses the block: each
	// member reads every other's stamp, which grows with the members
	// where message-based algorithms grow with their logarithm.
	shMembers = 16
	// shMaxAreas bounds the communicators with an area.
	shMaxAreas = 64
)

// shBlock is a world's view of the device's shared block. On one node
// every world rank has a share of it, its world rank's; when the job spans
// nodes the block is the node's, and its shares are the node's ranks'
// (slot).
type shBlock struct {
	mem      []byte
	size     int   // shares: world ranks, or the node's ranks
	slots    []int // share by world rank, -1 off this node; nil: the world rank
	areas    int
	partsOff int
}

// newShBlock lays out mem for size shares, slots giving each world rank's
// (nil: its rank), or returns nil when it has no room for one area or off
// is set (Options.NoShmColl).
func newShBlock(mem []byte, size int, slots []int, off bool) (*shBlock, error) {
	if off || len(mem) == 0 || size < 2 || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, nil
	}
	b := &shBlock{mem: mem, size: size, slots: slots}
	for a := min(shMaxAreas, len(mem)/(size*shPart)); a > 0; a-- {
		off := (a*size*4 + 127) &^ 127
		if off+a*size*shPart <= len(mem) {
			b.areas, b.partsOff = a, off
			break
		}
	}
	if b.areas == 0 {
		return nil, nil
	}
	return b, nil
}

// slot is world rank wr's share of the block, or -1 when it has none (it
// runs on another node).
func (b *shBlock) slot(wr int) int {
	if b.slots == nil {
		return wr
	}
	return b.slots[wr]
}

func (b *shBlock) word(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&b.mem[off]))
}

// shComm is a communicator's state for shared-memory collectives.
type shComm struct {
	c     *Comm
	me    int
	stamp [][2]*atomic.Uint32 // by member, by slot
	data  [][2][]byte         // by member, by slot: shSlot bytes
	size  [][2]*uint32        // by member, by slot: the length of its data
	sleep []*atomic.Uint32    // by member
	k     uint32              // the last round this member started
	err   error               // the failure that stopped this communicator's shared collectives
	// synced is a round every member was seen to have started: rounds
	// up to synced+1 may write their slots without looking (round k
	// reuses round k-2's slot).
	synced uint32

	// The current wait, here so that waiting allocates nothing.
	want     uint32
	from     int // the member waited for; -1: all
	next     int // the first member not yet seen at want
	armed    bool
	reported bool // the wait was published (reportWait)
	condFn   func() (bool, error)
	reportFn func()          // s.reportWait, built once
	armCtx   context.Context // lapi.WithArm(arm)
	report   request         // what the wait is for, for Waiting and timeouts
}

// newShComm sets c up for shared-memory collectives in area of the block,
// or leaves it (nil) when the world has no block, c has too few or too
// many members or a member on another node, or area is not in the block.
// A communicator's area is its context id / 2; a node's part of a
// communicator that spans nodes takes its parent's (hier.go).
func newShComm(c *Comm, area int) *shComm {
	b := c.w.sh
	n := len(c.group)
	if b == nil || n < 2 || n > shMembers || area >= b.areas {
		return nil
	}
	if b.slots != nil {
		for _, wr := range c.group {
			if b.slots[wr] < 0 {
				return nil
			}
		}
	}
	s := &shComm{c: c, me: c.rank, from: -1,
		stamp: make([][2]*atomic.Uint32, n), data: make([][2][]byte, n), size: make([][2]*uint32, n),
		sleep: make([]*atomic.Uint32, n)}
	for m, wr := range c.group {
		i := b.slot(wr)
		s.sleep[m] = b.word(4 * (area*b.size + i))
		part := b.partsOff + (area*b.size+i)*shPart
		for j := range 2 {
			off := part + j*shSlotStride
			s.stamp[m][j] = b.word(off)
			s.size[m][j] = (*uint32)(unsafe.Pointer(&b.mem[off+4]))
			s.data[m][j] = b.mem[off+8 : off+8+shSlot : off+8+shSlot]
		}
	}
	s.condFn, s.reportFn, s.armCtx = s.cond, s.reportWait, lapi.WithArm(context.Background(), s.arm)
	s.report = request{w: c.w, comm: c, recv: true, ctx: c.ctx | 1}
	return s
}

// after reports whether round a is round b or later (the counters wrap).
func after(a, b uint32) bool { return int32(a-b) >= 0 }

// shared reports whether a collective moving n bytes per member goes
// through the block: not after an abort the running call began after.
func (c *Comm) shared(n int) bool { return c.sh != nil && n <= shSlot && !c.coll.callShOff }

// publish begins the next round with this member's part of it: data
// copied into the round's slot, its length, then the stamp.
func (s *shComm) publish(data []byte, op string, tag int) (uint32, error) {
	k := s.k + 1
	j := k & 1
	if !after(s.synced, k-1) {
		// The slot was last used in round k-2: wait until every
		// member has started round k-1, so is done reading it.
		if err := s.wait(k-1, -1, op, tag); err != nil {
			return k, err
		}
		s.synced = k - 1
	}
	copy(s.data[s.me][j], data)
	*s.size[s.me][j] = sizeWord(len(data), s.c.coll.seq.Load())
	return s.start(), nil
}

// start begins the next round: it stamps it (in the round's slot, whose
// data it leaves alone) and nudges the members asleep.
func (s *shComm) start() uint32 {
	s.k++
	s.stamp[s.me][s.k&1].Store(s.k)
	for m, w := range s.sleep {
		if m != s.me && w.Load() != 0 {
			s.nudge(m)
		}
	}
	return s.k
}

// nudge sends member m an empty message, which wakes it if it blocked
// waiting for a stamp. An error is ignored: m cannot be reached (it
// failed, or this rank is closing), and the members waiting for it fail
// for that.
func (s *shComm) nudge(m int) {
	w := s.c.w
	_ = w.lc.Amsend(lapi.Rank(s.c.group[m]), w.hNudge, nil, nil, lapi.SendOpts{})
}

// arrived reports whether member from (or every member, from < 0) has
// stamped round want, moving next past those that have.
func (s *shComm) arrived() bool {
	j := s.want & 1
	if s.from >= 0 {
		return after(s.stamp[s.from][j].Load(), s.want)
	}
	for ; s.next < len(s.stamp); s.next++ {
		if s.next != s.me && !after(s.stamp[s.next][j].Load(), s.want) {
			return false
		}
	}
	return true
}

// wait waits until member from (every member, from < 0) has started
// round k, making progress and yielding or blocking as a message wait
// does. op and tag describe the wait in reports (op a constant such as
// "Barrier (shared memory)": building it would allocate).
func (s *shComm) wait(k uint32, from int, op string, tag int) error {
	s.want, s.from, s.next = k, from, 0
	if s.arrived() {
		return nil
	}
	w := s.c.w
	s.report.op, s.report.tag = op, tag
	ctx, cancel := w.deadline(s.armCtx)
	defer cancel()
	err := w.lc.WaitReport(ctx, s.condFn, s.reportFn)
	if s.armed {
		s.armed = false
		s.sleep[s.me].Store(0)
	}
	if s.reported {
		s.reported = false
		w.waiting.Store(nil)
		s.c.coll.unwatch()
	}
	if err != nil {
		s.report.src = s.waitedFor()
		s.err = w.waitErr(ctx, &s.report, err)
		return s.err
	}
	return nil
}

// waitedFor is the member the wait is for, or the first not yet seen.
func (s *shComm) waitedFor() int {
	if s.from >= 0 {
		return s.from
	}
	return s.next
}

// usable reports why the communicator's shared collectives cannot run: an
// earlier one failed, or the world is finalized (the block may be
// unmapped).
func (s *shComm) usable() error {
	if s.err != nil {
		return fmt.Errorf("an earlier shared-memory collective failed: %w", s.err)
	}
	if s.c.w.closed.Load() {
		return ErrFinalized
	}
	return nil
}

// cond is the wait's condition (under lapi's lock): the stamps, or the
// failure of a member not yet seen.
func (s *shComm) cond() (bool, error) {
	if s.arrived() {
		return true, nil
	}
	if err := s.failed(); err != nil {
		return false, err
	}
	if err := s.c.coll.abortedNow(); err != nil {
		return false, err
	}
	return false, nil
}

// reportWait is the wait's report: the wait stopped spinning, so what it
// waits for is worth naming.
func (s *shComm) reportWait() {
	s.report.src = s.waitedFor() // s.next: only this goroutine moves it
	s.reported = true
	s.c.w.waiting.Store(s.report.note())
	s.c.coll.watch()
}

// failed returns the failure of a member the wait still needs, if any
// (under lapi's lock).
func (s *shComm) failed() error {
	if s.from >= 0 {
		return s.peerErr(s.from)
	}
	for m := s.next; m < len(s.stamp); m++ {
		if m != s.me && !after(s.stamp[m][s.want&1].Load(), s.want) {
			if err := s.peerErr(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// peerErr is member m's failure (under lapi's lock).
func (s *shComm) peerErr(m int) error {
	if err := s.c.w.lc.PeerErr(lapi.Rank(s.c.group[m])); err != nil {
		return fmt.Errorf("mpi: rank %d: %w", m, err)
	}
	return nil
}

// arm runs before the wait blocks (lapi.WithArm): from now on a member
// that stamps a slot nudges this one. It reports whether it armed just
// now, so that the wait looks at the stamps once more before it sleeps.
func (s *shComm) arm() bool {
	if s.armed {
		return false
	}
	s.armed = true
	s.sleep[s.me].Store(1)
	return true
}

// nudgeHandler takes nudges: their arrival is what wakes a blocked wait,
// and there is nothing else to do.
type nudgeHandler struct{}

func (nudgeHandler) OnHeader(lapi.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (nudgeHandler) OnComplete(lapi.Rank, any)                     {}

// barrier: every member stamps the round and waits for the others'.
func (s *shComm) barrier() error {
	if err := s.usable(); err != nil {
		return err
	}
	k := s.start()
	if err := s.wait(k, -1, "Barrier (shared memory)", tagBarrier); err != nil {
		return err
	}
	s.synced = k
	return nil
}

// exchange publishes data and waits for every member's part of the
// round, which it returns.
func (s *shComm) exchange(data []byte, op string, tag int) (uint32, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	k, err := s.publish(data, op, tag)
	if err == nil {
		err = s.wait(k, -1, op, tag)
	}
	if err != nil {
		return k, err
	}
	s.synced = k
	return k, nil
}

// allreduce: every member publishes send and reduces all the parts in
// member order, so that every member computes the same result bit for
// bit. recv may be send.
func (s *shComm) allreduce(send, recv []byte, red reducer) error {
	k, err := s.exchange(send, "Allreduce (shared memory)", tagAllreduce)
	if err != nil {
		return err
	}
	return s.combine(k, recv, red)
}

// combine reduces round k's parts, in member order, into recv.
func (s *shComm) combine(k uint32, recv []byte, red reducer) error {
	if err := s.sizes(k, len(recv), -1); err != nil {
		return err
	}
	j := k & 1
	copy(recv, s.data[0][j][:len(recv)])
	for m := 1; m < len(s.data); m++ {
		red.reduce(recv, s.data[m][j][:len(recv)])
	}
	return nil
}

// sizes checks that member from's part of round k (every member's, from <
// 0) has n bytes: members that disagree on a collective's size get an
// error naming both sizes instead of each other's stale bytes.
func (s *shComm) sizes(k uint32, n, from int) error {
	for m := range s.size {
		if from >= 0 && m != from {
			continue
		}
		w := *s.size[m][k&1]
		if got := int(w & sizeMask); got != n {
			return fmt.Errorf("ranks disagree: rank %d gave %d bytes, rank %d expects %d: %w", m, got, s.me, n, ErrArg)
		}
		if call := s.c.coll.seq.Load(); w>>sizeBits != call&(1<<(32-sizeBits)-1) {
			return fmt.Errorf("ranks disagree: rank %d's part is of collective #%d, rank %d is in #%d: %w", m, w>>sizeBits, s.me, call, ErrArg)
		}
	}
	return nil
}

// A part's size word holds its length and, above it, the number of the
// collective call it belongs to (collState.seq), so that members whose
// rounds went out of step (after ranks disagreed on which calls go
// through the block) are told, not handed a stale part of the right size.
const (
	sizeBits = 12 // shSlot fits
	sizeMask = 1<<sizeBits - 1
)

func sizeWord(n int, call uint32) uint32 { return uint32(n) | call<<sizeBits }

// toRoot publishes data and, at root, waits for every member's part of
// the round. It reports the round and whether this member is root (and
// so has the parts to read).
func (s *shComm) toRoot(data []byte, root int, op string, tag int) (uint32, bool, error) {
	if err := s.usable(); err != nil {
		return 0, false, err
	}
	k, err := s.publish(data, op, tag)
	if err != nil || s.me != root {
		return k, false, err
	}
	if err := s.wait(k, -1, op, tag); err != nil {
		return k, false, err
	}
	s.synced = k
	return k, true, nil
}

// fromRoot: root publishes data; the others stamp the round (they have
// started it) and wait for root's part, which must have n bytes. It
// reports the round and whether this member is not root (and so has
// root's part to read).
func (s *shComm) fromRoot(data []byte, n, root int, op string, tag int) (uint32, bool, error) {
	if err := s.usable(); err != nil {
		return 0, false, err
	}
	if s.me == root {
		k, err := s.publish(data, op, tag)
		return k, false, err
	}
	k := s.start()
	if err := s.wait(k, root, op, tag); err != nil {
		return k, false, err
	}
	if err := s.sizes(k, n, root); err != nil {
		return k, false, err
	}
	return k, true, nil
}

// reduce: root reduces every member's send, in member order, into recv.
func (s *shComm) reduce(send, recv []byte, red reducer, root int) error {
	k, mine, err := s.toRoot(send, root, "Reduce (shared memory)", tagReduce)
	if !mine {
		return err
	}
	return s.combine(k, recv[:len(send)], red)
}

// bcast: every member copies root's b.
func (s *shComm) bcast(b []byte, root int) error {
	k, read, err := s.fromRoot(b, len(b), root, "Bcast (shared memory)", tagBcast)
	if read {
		copy(b, s.data[root][k&1][:len(b)])
	}
	return err
}

// gather: root copies every member's send into recv.
func (s *shComm) gather(send, recv []byte, root int) error {
	k, mine, err := s.toRoot(send, root, "Gather (shared memory)", tagGather)
	if !mine {
		return err
	}
	return s.collect(k, recv, len(send))
}

// allgather: every member publishes send and copies every part in.
func (s *shComm) allgather(send, recv []byte) error {
	k, err := s.exchange(send, "Allgather (shared memory)", tagAllgather)
	if err != nil {
		return err
	}
	return s.collect(k, recv, len(send))
}

// collect copies round k's parts, n bytes each, into recv in member order.
func (s *shComm) collect(k uint32, recv []byte, n int) error {
	if err := s.sizes(k, n, -1); err != nil {
		return err
	}
	for m := range s.data {
		copy(recv[m*n:(m+1)*n], s.data[m][k&1][:n])
	}
	return nil
}

// scatter: root publishes all the blocks; each member copies its own.
func (s *shComm) scatter(send, recv []byte, root int) error {
	n := len(recv)
	var blocks []byte
	if s.me == root {
		blocks = send[:len(s.data)*n]
	}
	k, read, err := s.fromRoot(blocks, len(s.data)*n, root, "Scatter (shared memory)", tagScatter)
	switch {
	case read:
		copy(recv, s.data[root][k&1][s.me*n:])
	case err == nil:
		copy(recv, send[s.me*n:]) // root's own block
	}
	return err
}

// alltoall: every member publishes its blocks and copies block me of
// every member's.
func (s *shComm) alltoall(send, recv []byte) error {
	k, err := s.exchange(send, "Alltoall (shared memory)", tagAlltoall)
	if err != nil {
		return err
	}
	if err := s.sizes(k, len(send), -1); err != nil {
		return err
	}
	n := len(send) / len(s.data)
	for m := range s.data {
		copy(recv[m*n:(m+1)*n], s.data[m][k&1][s.me*n:(s.me+1)*n])
	}
	return nil
}
