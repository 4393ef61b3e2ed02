package mpi

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// hierLayouts are pretend node layouts (rank r on node layout[r]) that
// span nodes with some node of several ranks: even, uneven, a lone rank
// on a node, and nodes interleaved in rank order.
var hierLayouts = [][]int{{0, 0, 2, 2}, {0, 0, 0, 3, 3}, {0, 1, 1, 1}, {0, 1, 0, 1, 0}}

// runLayout runs fn on len(nodes) goroutine ranks pretending to be on
// nodes, with the environment's options, shared-memory collectives on or
// off, and a timeout that turns a hang into an error.
func runLayout(t *testing.T, nodes []int, shm bool, fn func(c *Comm) error) error {
	t.Helper()
	opts := envOptions(t)
	opts.NoShmColl = !shm
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	return runNodes(len(nodes), opts, nodes, fn)
}

// hierCase is one element type's values and reductions for the checks:
// mk makes an element of a small integer (wrapping as T's arithmetic
// does), ops are the reductions defined on T.
type hierCase[T Elem] struct {
	mk  func(int64) T
	ops []Op
}

// val is rank r's element e: a small positive integer, so that every
// reduction of a few ranks' is exact in every type (or wraps the same
// way in the check as in the reduction).
func val(r, e int) int64 { return int64((r+e)%5 + 1) }

// fold is op over ranks 0..p-1's element e, in int64.
func fold(op Op, p, e int) int64 {
	acc := val(0, e)
	for r := 1; r < p; r++ {
		v := val(r, e)
		switch op {
		case Sum:
			acc += v
		case Prod:
			acc *= v
		case Max:
			acc = max(acc, v)
		case Min:
			acc = min(acc, v)
		}
	}
	return acc
}

// counted runs one collective and checks that it took the hierarchical
// path exactly when want says.
func counted(c *Comm, want bool, what string, f func() error) error {
	before := c.w.hierCalls.Load()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	got := c.w.hierCalls.Load() - before
	if w := map[bool]int64{false: 0, true: 1}[want]; got != w {
		return fmt.Errorf("%s: %d hierarchical calls, want %d", what, got, w)
	}
	return nil
}

// checkColls runs every collective with every root on c, m elements per
// rank (per block for Allgather, Gather, Scatter and Alltoall: blk), and
// checks every result exactly and that the hierarchical path ran when
// hier says (Alltoall stays flat).
func checkColls[T Elem](c *Comm, hc hierCase[T], m, blk int, hier bool) error {
	p, me := c.Size(), c.Rank()
	mine := func(n int) []T {
		s := make([]T, n)
		for e := range s {
			s[e] = hc.mk(val(me, e))
		}
		return s
	}
	if err := counted(c, hier, "barrier", c.Barrier); err != nil {
		return err
	}
	for root := range p {
		b := make([]T, m)
		if me == root {
			b = mine(m)
		}
		if err := counted(c, hier, fmt.Sprintf("bcast from %d", root), func() error { return Bcast(c, b, root) }); err != nil {
			return err
		}
		for e, v := range b {
			if want := hc.mk(val(root, e)); v != want {
				return fmt.Errorf("bcast from %d: element %d = %v, want %v", root, e, v, want)
			}
		}
	}
	for _, op := range hc.ops {
		for root := range p {
			send, recv := mine(m), make([]T, m)
			if err := counted(c, hier, fmt.Sprintf("reduce %v to %d", op, root), func() error { return Reduce(c, send, recv, op, root) }); err != nil {
				return err
			}
			if me == root {
				for e, v := range recv {
					if want := hc.mk(fold(op, p, e)); v != want {
						return fmt.Errorf("reduce %v to %d: element %d = %v, want %v", op, root, e, v, want)
					}
				}
			}
		}
		for _, inPlace := range []bool{false, true} {
			send := mine(m)
			recv := send
			if !inPlace {
				recv = make([]T, m)
			}
			if err := counted(c, hier, fmt.Sprintf("allreduce %v", op), func() error { return Allreduce(c, send, recv, op) }); err != nil {
				return err
			}
			for e, v := range recv {
				if want := hc.mk(fold(op, p, e)); v != want {
					return fmt.Errorf("allreduce %v (in place %v): element %d = %v, want %v", op, inPlace, e, v, want)
				}
			}
		}
	}
	// Blocks: member q's block e is val(q, e).
	block := func(all []T, q int) error {
		for e, v := range all[q*blk : (q+1)*blk] {
			if want := hc.mk(val(q, e)); v != want {
				return fmt.Errorf("block of rank %d, element %d = %v, want %v", q, e, v, want)
			}
		}
		return nil
	}
	all := make([]T, p*blk)
	if err := counted(c, hier, "allgather", func() error { return Allgather(c, mine(blk), all) }); err != nil {
		return err
	}
	for q := range p {
		if err := block(all, q); err != nil {
			return fmt.Errorf("allgather: %w", err)
		}
	}
	for root := range p {
		all := make([]T, p*blk)
		if err := counted(c, hier, fmt.Sprintf("gather to %d", root), func() error { return Gather(c, mine(blk), all, root) }); err != nil {
			return err
		}
		for q := range p {
			if me != root {
				break
			}
			if err := block(all, q); err != nil {
				return fmt.Errorf("gather to %d: %w", root, err)
			}
		}
		var send []T
		if me == root {
			send = make([]T, p*blk)
			for q := range p {
				for e := range blk {
					send[q*blk+e] = hc.mk(val(q, e))
				}
			}
		}
		got := make([]T, blk)
		if err := counted(c, hier, fmt.Sprintf("scatter from %d", root), func() error { return Scatter(c, send, got, root) }); err != nil {
			return err
		}
		if err := block(slices.Repeat(got, p), me); err != nil {
			return fmt.Errorf("scatter from %d: %w", root, err)
		}
	}
	send, recv := make([]T, p*blk), make([]T, p*blk)
	for q := range p {
		for e := range blk {
			send[q*blk+e] = hc.mk(val(me*p+q, e))
		}
	}
	if err := counted(c, false, "alltoall", func() error { return Alltoall(c, send, recv) }); err != nil {
		return err
	}
	for q := range p {
		for e, v := range recv[q*blk : (q+1)*blk] {
			if want := hc.mk(val(q*p+me, e)); v != want {
				return fmt.Errorf("alltoall: from %d element %d = %v, want %v", q, e, v, want)
			}
		}
	}
	return nil
}

var (
	allOps   = []Op{Sum, Prod, Max, Min}
	float64s = hierCase[float64]{func(x int64) float64 { return float64(x) }, allOps}
	int32s   = hierCase[int32]{func(x int64) int32 { return int32(x) }, allOps}
	int8s    = hierCase[int8]{func(x int64) int8 { return int8(x) }, allOps}
	uint8s   = hierCase[uint8]{func(x int64) uint8 { return uint8(x) }, allOps}
	complexs = hierCase[complex128]{func(x int64) complex128 { return complex(float64(x), -float64(x)) }, []Op{Sum}}
)

// sizeClasses are the elements per rank the checks run with, in bytes of
// float64: tiny, a shared-memory slot and just past it, and large.
var sizeClasses = []struct {
	name string
	m    int
}{{"1", 1}, {"3", 3}, {"2KiB", shSlot / 8}, {"2KiB+8", shSlot/8 + 1}, {"1MiB", 1 << 17}}

// TestHierCollectives runs every collective on every pretend layout, with
// shared-memory collectives on and off, at every size class, every root
// and every op, on the world and on a Dup of it, checks each result
// exactly and that the node-aware path ran (Alltoall's flat one).
func TestHierCollectives(t *testing.T) {
	for _, nodes := range hierLayouts {
		for _, shm := range []bool{true, false} {
			t.Run(fmt.Sprintf("nodes=%v/shm=%v", nodes, shm), func(t *testing.T) {
				err := runLayout(t, nodes, shm, func(c *Comm) error {
					if c.hier == nil {
						return fmt.Errorf("no hierarchy on %v", nodes)
					}
					d, err := c.Dup()
					if err != nil {
						return err
					}
					for _, sz := range sizeClasses {
						if testing.Short() && sz.m > shSlot {
							continue
						}
						m, blk := sz.m, max(1, sz.m/c.Size())
						if sz.m < shSlot {
							blk = sz.m
						}
						cc := float64s
						if sz.m > shSlot {
							cc.ops = []Op{Sum, Max} // the others only run the same paths longer
						}
						for i, comm := range []*Comm{c, d} {
							if err := checkColls(comm, cc, m, blk, true); err != nil {
								return fmt.Errorf("%s elements, comm %d: %w", sz.name, i, err)
							}
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestHierTypes runs the collectives over a few element types, tiny and
// a slot's worth, with every op defined on them.
func TestHierTypes(t *testing.T) {
	for _, nodes := range [][]int{{0, 0, 2, 2}, {0, 1, 0, 1, 0}} {
		t.Run(fmt.Sprint(nodes), func(t *testing.T) {
			err := runLayout(t, nodes, true, func(c *Comm) error {
				for _, m := range []int{3, shSlot / 8} {
					for _, err := range []error{
						checkColls(c, int32s, m, m, true),
						checkColls(c, int8s, m, m, true),
						checkColls(c, uint8s, m, m, true),
						checkColls(c, complexs, m, m, true),
					} {
						if err != nil {
							return fmt.Errorf("%d elements: %w", m, err)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHierSplit: communicators split from a world on nodes {0,0,0,3,3,3}
// run node-aware when they span nodes with some node of several members,
// through shared memory when they are on one node, and flat when each of
// their members is on a node of its own.
func TestHierSplit(t *testing.T) {
	nodes := []int{0, 0, 0, 3, 3, 3}
	cases := []struct {
		name         string
		color        func(r int) int
		hier, shared bool
	}{
		{"r%2", func(r int) int { return r % 2 }, true, false},       // {0,2,4}, {1,3,5}: 2+1 and 1+2 per node
		{"r<4", func(r int) int { return min(r/4, 1) }, true, false}, // {0,1,2,3}: 3+1; {4,5}: one node
		{"r/3", func(r int) int { return r / 3 }, false, true},       // one node each
		{"r%3", func(r int) int { return r % 3 }, false, false},      // a member per node
	}
	for _, shm := range []bool{true, false} {
		t.Run(fmt.Sprintf("shm=%v", shm), func(t *testing.T) {
			err := runLayout(t, nodes, shm, func(c *Comm) error {
				for _, tc := range cases {
					s, err := c.Split(tc.color(c.Rank()), -c.Rank()) // reversed: ranks not in world order
					if err != nil {
						return err
					}
					onOne := true
					for _, wr := range s.group {
						onOne = onOne && nodes[wr] == nodes[c.Rank()]
					}
					hier := tc.hier && !onOne
					if (s.hier != nil) != hier {
						return fmt.Errorf("split %s: hierarchy %v, want %v", tc.name, s.hier != nil, hier)
					}
					if want := shm && onOne && s.Size() > 1; (s.sh != nil) != want {
						return fmt.Errorf("split %s: shared-memory collectives %v, want %v", tc.name, s.sh != nil, want)
					}
					for _, m := range []int{3, shSlot/8 + 1} {
						if err := checkColls(s, float64s, m, m, hier); err != nil {
							return fmt.Errorf("split %s, %d elements: %w", tc.name, m, err)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHierNodeBlock: the node's part of a communicator that spans nodes
// gets shared-memory collectives in its parent's area, the leaders none,
// and the parent none itself.
func TestHierNodeBlock(t *testing.T) {
	nodes := []int{0, 0, 0, 3, 3}
	err := runLayout(t, nodes, true, func(c *Comm) error {
		h := c.hier
		switch {
		case c.sh != nil:
			return errors.New("the world, spanning nodes, has shared-memory collectives")
		case h.node.sh == nil:
			return errors.New("the node's part has no shared-memory collectives")
		case h.node.size != map[int]int{0: 3, 3: 2}[nodes[c.Rank()]]:
			return fmt.Errorf("node part of %d members", h.node.size)
		case (h.leaders != nil) != (c.Rank() == 0 || c.Rank() == 3):
			return fmt.Errorf("leaders' part %v at rank %d", h.leaders != nil, c.Rank())
		case h.leaders != nil && (h.leaders.sh != nil || h.leaders.size != 2):
			return fmt.Errorf("leaders' part: %d members, shared %v", h.leaders.size, h.leaders.sh != nil)
		case h.node.ctx != hierCtxBit || h.leaders != nil && h.leaders.ctx != hierCtxBit|2:
			return fmt.Errorf("parts' context ids %#x", h.node.ctx)
		case h.node.coll != c.coll:
			return errors.New("the node's part does not share its parent's calls")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHierLayoutCheck: node ids must name each node by its lowest rank;
// one node is today's layout.
func TestHierLayoutCheck(t *testing.T) {
	for _, bad := range []struct {
		nodes []int
		size  int
	}{{[]int{0, 0, 1}, 3}, {[]int{0, 2, 2}, 3}, {[]int{1, 1}, 2}, {[]int{-1, 0}, 2}, {[]int{0}, 2}} {
		if _, err := (layout{nodes: bad.nodes}).check(0, bad.size); !errors.Is(err, ErrArg) {
			t.Errorf("layout %v of %d ranks: %v, want ErrArg", bad.nodes, bad.size, err)
		}
	}
	for _, tc := range []struct {
		nodes []int
		rank  int
		slots []int
	}{
		{[]int{0, 0, 0}, 1, nil},
		{[]int{0, 1, 0, 1}, 3, []int{-1, 0, -1, 1}},
		{[]int{0, 0, 2, 2, 2}, 0, []int{0, 1, -1, -1, -1}},
	} {
		l, err := (layout{nodes: tc.nodes}).check(tc.rank, len(tc.nodes))
		if err != nil || !slices.Equal(l.slots, tc.slots) {
			t.Errorf("layout %v at rank %d: slots %v, %v; want %v", tc.nodes, tc.rank, l.slots, err, tc.slots)
		}
	}
}

// TestHierMismatch: ranks that disagree on a collective's length under a
// node layout get an error naming the disagreement, never a hang, and
// the communicator goes on, as TestCollectiveMismatch checks on one node.
func TestHierMismatch(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	pairs := [][2]int{{10, 11}, {1000, 15}, {256, 257}, {100000, 100001}, {200000, 20}}
	if testing.Short() {
		pairs = [][2]int{{10, 11}, {1000, 15}}
	}
	kinds := []string{"Allreduce", "Allgather", "Alltoall", "Bcast", "Reduce", "Gather", "Scatter"}
	for _, nodes := range [][]int{{0, 0, 2, 2}, {0, 1, 1}} {
		for _, shm := range []string{"on", "off"} {
			t.Run(fmt.Sprintf("nodes=%v/shmcoll=%s", nodes, shm), func(t *testing.T) {
				t.Setenv("WEFT_SHMCOLL", shm)
				run := func(n int, fn func(c *Comm) error) error {
					opts := envOptions(t)
					return runNodes(n, opts, nodes, fn)
				}
				for _, kind := range kinds {
					for _, pair := range pairs {
						if kind == "Alltoall" && pair[0] > 10000 {
							continue
						}
						checkMismatchOn(t, run, len(nodes), kind, pair)
					}
				}
			})
		}
	}
}

// TestHierAbortFailsParts: a rank that fails a hierarchical call (a bad
// root) aborts it on every member, including one waiting in the leaders'
// part on another node, and the communicator goes on.
func TestHierAbortFailsParts(t *testing.T) {
	t.Setenv("WEFT_TIMEOUT", "20s")
	for _, shm := range []bool{true, false} {
		err := runLayout(t, []int{0, 0, 2, 2}, shm, func(c *Comm) error {
			v := []float64{1}
			root := 0
			if c.Rank() == 2 {
				root = 7 // fails at once, before any step
			}
			err := Reduce(c, v, make([]float64, 1), Sum, root)
			if c.Rank() == 2 && !errors.Is(err, ErrRank) {
				return fmt.Errorf("rank 2: %v, want ErrRank", err)
			}
			if c.Rank() == 0 && (!errors.Is(err, ErrArg) || !strings.Contains(err.Error(), "aborted")) {
				return fmt.Errorf("rank 0 (waits for rank 2 in the leaders' part): %v, want the abort", err)
			}
			for i := range 2 {
				w := []float64{float64(c.Rank())}
				err := Allreduce(c, w, w, Sum)
				if err == nil && w[0] != 6 || err != nil && (i == 1 || !errors.Is(err, ErrArg)) {
					return fmt.Errorf("allreduce %d after: %v, %v", i, w, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("shm %v: %v", shm, err)
		}
	}
}
