package shmcoll

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Host is what a group needs from the layer that runs it.
type Host interface {
	// Wait returns once the group's Arrived reports true, making
	// progress meanwhile; or with the failure of a member the wait
	// still needs (Pending), or another reason to stop (an abort, a
	// timeout). Before it blocks it calls Arm, and reads Arrived again
	// when Arm reports it armed just now; when it returns it calls
	// Disarm. op and tag describe the wait (op a constant such as
	// "Barrier (shared memory)": building one would allocate).
	Wait(op string, tag int) error
	// Nudge wakes member m if it blocked in Wait (an error is the
	// Host's to ignore: the members waiting for m fail for it).
	Nudge(m int)
	// Begin starts a collective: it returns the identity of the
	// collective call in progress, the same at every member that agrees
	// on the call (a part's size word carries its low 20 bits, so that
	// members whose rounds went out of step, or that disagree, are
	// told), or why the group may not run one now (the block may be
	// unmapped). One call per collective keeps the hot path to one
	// indirect call.
	Begin() (call uint32, err error)
}

// Config places a group in a block.
type Config struct {
	// Members are the group's world ranks, in member order; Me is this
	// rank's index among them.
	Members []int
	Me      int
	// Area is the group's area of the block, below Block.Areas.
	Area int
	// ErrArg is what the error of a collective whose members disagree
	// on its size or call wraps (MPI's ErrArg).
	ErrArg error
	// Tags name the collectives in the Host's reports.
	Tags Tags
}

// Group is a rank's state for the collectives of one group through a
// block: its round and the words and slots of every member.
type Group struct {
	h     Host
	me    int
	argE  error
	tags  Tags
	stamp [][2]*atomic.Uint32 // by member, by slot
	data  [][2][]byte         // by member, by slot: SlotLen bytes
	size  [][2]*uint32        // by member, by slot: the length of its data
	sleep []*atomic.Uint32    // by member
	k     uint32              // the last round this member started
	call  uint32              // the collective call in progress (Host.Begin)
	err   error               // the failure that stopped this group's collectives
	// synced is a round every member was seen to have started: rounds
	// up to synced+1 may write their slots without looking (round k
	// reuses round k-2's slot).
	synced uint32

	// The current wait, here so that waiting allocates nothing.
	want  uint32
	from  int // the member waited for; -1: all
	next  int // the first member not yet seen at want
	armed bool
}

// NewGroup sets up the group cfg describes in b, run by h, or returns nil
// when b is nil, the group has fewer than two or more than MaxMembers
// members, a member has no share of b (it runs on another node), or the
// area is not in b.
func NewGroup(b *Block, cfg Config, h Host) *Group {
	n := len(cfg.Members)
	if b == nil || n < 2 || n > MaxMembers || cfg.Area < 0 || cfg.Area >= b.areas {
		return nil
	}
	for _, wr := range cfg.Members {
		if b.share(wr) < 0 {
			return nil
		}
	}
	g := &Group{h: h, me: cfg.Me, argE: cfg.ErrArg, tags: cfg.Tags, from: -1,
		stamp: make([][2]*atomic.Uint32, n), data: make([][2][]byte, n), size: make([][2]*uint32, n),
		sleep: make([]*atomic.Uint32, n)}
	for m, wr := range cfg.Members {
		i := b.share(wr)
		g.sleep[m] = b.word(4 * (cfg.Area*b.shares + i))
		part := b.partsOff + (cfg.Area*b.shares+i)*partLen
		for j := range 2 {
			off := part + j*slotStride
			g.stamp[m][j] = b.word(off)
			g.size[m][j] = (*uint32)(unsafe.Pointer(&b.mem[off+4]))
			g.data[m][j] = b.mem[off+8 : off+8+SlotLen : off+8+SlotLen]
		}
	}
	return g
}

// after reports whether round a is round b or later (the counters wrap).
func after(a, b uint32) bool { return int32(a-b) >= 0 }

// Rounds is the number of rounds this member has started.
func (g *Group) Rounds() uint32 { return g.k }

// Asleep reports whether member m's sleep word is set: it blocked, or is
// about to, in a wait.
func (g *Group) Asleep(m int) bool { return g.sleep[m].Load() != 0 }

// Stamp is the round member m last stamped in slot j (0 or 1).
func (g *Group) Stamp(m, j int) uint32 { return g.stamp[m][j].Load() }

// publish begins the next round with this member's part of it: data
// copied into the round's slot, its length, then the stamp.
func (g *Group) publish(data []byte, op string, tag int) (uint32, error) {
	k := g.k + 1
	j := k & 1
	if !after(g.synced, k-1) {
		// The slot was last used in round k-2: wait until every
		// member has started round k-1, so is done reading it.
		if err := g.wait(k-1, -1, op, tag); err != nil {
			return k, err
		}
		g.synced = k - 1
	}
	copy(g.data[g.me][j], data)
	*g.size[g.me][j] = sizeWord(len(data), g.call)
	return g.start(), nil
}

// start begins the next round: it stamps it (in the round's slot, whose
// data it leaves alone) and nudges the members asleep.
func (g *Group) start() uint32 {
	g.k++
	g.stamp[g.me][g.k&1].Store(g.k)
	for m, w := range g.sleep {
		if m != g.me && w.Load() != 0 {
			g.h.Nudge(m)
		}
	}
	return g.k
}

// Arrived reports whether the member waited for (or every member) has
// stamped the round waited for, moving past those that have: the
// condition of Host.Wait.
func (g *Group) Arrived() bool {
	j := g.want & 1
	if g.from >= 0 {
		return after(g.stamp[g.from][j].Load(), g.want)
	}
	for ; g.next < len(g.stamp); g.next++ {
		if g.next != g.me && !after(g.stamp[g.next][j].Load(), g.want) {
			return false
		}
	}
	return true
}

// wait waits until member from (every member, from < 0) has started
// round k, through the Host. A failure stops the group's collectives.
func (g *Group) wait(k uint32, from int, op string, tag int) error {
	g.want, g.from, g.next = k, from, 0
	if g.Arrived() {
		return nil
	}
	if err := g.h.Wait(op, tag); err != nil {
		g.err = err
		return err
	}
	return nil
}

// WaitedFor is the member the wait is for, or the first not yet seen.
func (g *Group) WaitedFor() int {
	if g.from >= 0 {
		return g.from
	}
	return g.next
}

// Pending returns the first error failed reports for a member the wait
// still needs (failed is given member indexes), or nil.
func (g *Group) Pending(failed func(m int) error) error {
	if g.from >= 0 {
		return failed(g.from)
	}
	for m := g.next; m < len(g.stamp); m++ {
		if m != g.me && !after(g.stamp[m][g.want&1].Load(), g.want) {
			if err := failed(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// Arm runs before the wait blocks: from now on a member that stamps a
// slot nudges this one. It reports whether it armed just now, so that the
// wait looks at the stamps once more before it sleeps.
func (g *Group) Arm() bool {
	if g.armed {
		return false
	}
	g.armed = true
	g.sleep[g.me].Store(1)
	return true
}

// Disarm ends what Arm began, when the wait returns.
func (g *Group) Disarm() {
	if g.armed {
		g.armed = false
		g.sleep[g.me].Store(0)
	}
}

// usable begins a collective (Host.Begin), or reports why the group's
// collectives cannot run: an earlier one failed, or the Host says so.
func (g *Group) usable() error {
	if g.err != nil {
		return fmt.Errorf("an earlier shared-memory collective failed: %w", g.err)
	}
	call, err := g.h.Begin()
	g.call = call
	return err
}

// sizes checks that member from's part of round k (every member's, from <
// 0) has n bytes: members that disagree on a collective's size get an
// error naming both sizes instead of each other's stale bytes.
func (g *Group) sizes(k uint32, n, from int) error {
	for m := range g.size {
		if from >= 0 && m != from {
			continue
		}
		w := *g.size[m][k&1]
		if got := int(w & sizeMask); got != n {
			return fmt.Errorf("ranks disagree: rank %d gave %d bytes, rank %d expects %d: %w", m, got, g.me, n, g.argE)
		}
		if call := g.call; w>>sizeBits != call&(1<<(32-sizeBits)-1) {
			return fmt.Errorf("ranks disagree: rank %d's part is of another collective call than rank %d's (%#x, %#x: their number or their op or root): %w",
				m, g.me, w>>sizeBits, call&(1<<(32-sizeBits)-1), g.argE)
		}
	}
	return nil
}

// A part's size word holds its length and, above it, the number of the
// collective call it belongs to (Host.Begin), so that members whose rounds
// went out of step (after ranks disagreed on which calls go through the
// block) are told, not handed a stale part of the right size.
const (
	sizeBits = 12 // SlotLen fits
	sizeMask = 1<<sizeBits - 1
)

func sizeWord(n int, call uint32) uint32 { return uint32(n) | call<<sizeBits }
