package shmcoll

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

var errArg = errors.New("test: invalid argument")

// spinHost is a Host over goroutines: Wait spins on Arrived, giving up
// after a while; a member never blocks, so nudges are only counted.
type spinHost struct {
	g      *Group
	call   uint32
	nudges int
}

func (h *spinHost) Wait(op string, tag int) error {
	deadline := time.Now().Add(10 * time.Second)
	for !h.g.Arrived() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (tag %d): member %d never came", op, tag, h.g.WaitedFor())
		}
		runtime.Gosched()
	}
	h.g.Disarm()
	return nil
}
func (h *spinHost) Nudge(int)              { h.nudges++ }
func (h *spinHost) Begin() (uint32, error) { return h.call, nil }
func (h *spinHost) next() *Group           { h.call++; return h.g }
func sum(dst, src []byte) {
	binary.LittleEndian.PutUint64(dst, binary.LittleEndian.Uint64(dst)+binary.LittleEndian.Uint64(src))
}
func u64(v uint64) []byte        { return binary.LittleEndian.AppendUint64(nil, v) }
func get(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
func newBlock(t *testing.T, n int) *Block {
	t.Helper()
	mem := make([]uint64, 64<<10/8*n) // 64 KiB a share, 8-byte aligned
	b := NewBlock(unsafeBytes(mem), n, nil)
	if b == nil {
		t.Fatal("NewBlock: no room")
	}
	return b
}

// run runs fn as each of n members of a group in area 0 of one block.
func run(t *testing.T, n int, fn func(me int, h *spinHost) error) {
	t.Helper()
	b := newBlock(t, n)
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for me := range n {
		h := &spinHost{}
		h.g = NewGroup(b, Config{Members: members, Me: me, ErrArg: errArg}, h)
		if h.g == nil {
			t.Fatalf("member %d: no group", me)
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[me] = fn(me, h) }()
	}
	wg.Wait()
	for me, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", me, err)
		}
	}
}

// TestCollectives: many rounds of every collective on 2, 3 and 5
// members, each result checked, so that the slots' reuse every other
// round is exercised.
func TestCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			run(t, n, func(me int, h *spinHost) error {
				for i := range 30 {
					root := i % n
					got := make([]byte, 8)
					if err := h.next().Allreduce(u64(uint64(me+i)), got, sum); err != nil {
						return err
					}
					if want := uint64(n*(n-1)/2 + n*i); get(got, 0) != want {
						return fmt.Errorf("round %d: Allreduce %d, want %d", i, get(got, 0), want)
					}
					b := u64(uint64(100 + me))
					if err := h.next().Bcast(b, root); err != nil {
						return err
					}
					if get(b, 0) != uint64(100+root) {
						return fmt.Errorf("round %d: Bcast %d from root %d", i, get(b, 0), root)
					}
					all := make([]byte, 8*n)
					if err := h.next().Allgather(u64(uint64(me*i)), all); err != nil {
						return err
					}
					for m := range n {
						if get(all, m) != uint64(m*i) {
							return fmt.Errorf("round %d: Allgather part %d is %d", i, m, get(all, m))
						}
					}
					send := make([]byte, 8*n)
					for m := range n {
						binary.LittleEndian.PutUint64(send[8*m:], uint64(me*10+m))
					}
					if err := h.next().Alltoall(send, all); err != nil {
						return err
					}
					for m := range n {
						if get(all, m) != uint64(m*10+me) {
							return fmt.Errorf("round %d: Alltoall block from %d is %d", i, m, get(all, m))
						}
					}
					if err := h.next().Barrier(); err != nil {
						return err
					}
				}
				if h.g.Rounds() != 150 {
					return fmt.Errorf("%d rounds, want 150", h.g.Rounds())
				}
				return nil
			})
		})
	}
}

// TestRootedCollectives: Reduce, Gather and Scatter reach the root, or
// each member, with every root.
func TestRootedCollectives(t *testing.T) {
	const n = 4
	run(t, n, func(me int, h *spinHost) error {
		for root := range n {
			got := make([]byte, 8)
			if err := h.next().Reduce(u64(uint64(me)), got, sum, root); err != nil {
				return err
			}
			if me == root && get(got, 0) != n*(n-1)/2 {
				return fmt.Errorf("root %d: Reduce %d", root, get(got, 0))
			}
			all := make([]byte, 8*n)
			if err := h.next().Gather(u64(uint64(me+root)), all, root); err != nil {
				return err
			}
			for m := range n {
				if me == root && get(all, m) != uint64(m+root) {
					return fmt.Errorf("root %d: Gather part %d is %d", root, m, get(all, m))
				}
			}
			var send []byte
			if me == root {
				for m := range n {
					send = append(send, u64(uint64(root*100+m))...)
				}
			}
			mine := make([]byte, 8)
			if err := h.next().Scatter(send, mine, root); err != nil {
				return err
			}
			if get(mine, 0) != uint64(root*100+me) {
				return fmt.Errorf("root %d: Scatter gave %d", root, get(mine, 0))
			}
		}
		return nil
	})
}

// TestDisagree: members that pass different sizes get an error wrapping
// Config.ErrArg that names both sizes.
func TestDisagree(t *testing.T) {
	run(t, 2, func(me int, h *spinHost) error {
		all := make([]byte, 8*(me+1)*2)
		err := h.next().Allgather(make([]byte, 8*(me+1)), all)
		if !errors.Is(err, errArg) || !strings.Contains(err.Error(), "ranks disagree") {
			return fmt.Errorf("Allgather of 8 and 16 bytes: %v; want a disagreement wrapping ErrArg", err)
		}
		return nil
	})
}

// TestNewGroupRefuses: no group without a block, of one member or more
// than MaxMembers, with a member off the node, or outside the areas; no
// block without room or shares.
func TestNewGroupRefuses(t *testing.T) {
	b := newBlock(t, 4)
	h := &spinHost{}
	for _, c := range []struct {
		name string
		b    *Block
		cfg  Config
	}{
		{"no block", nil, Config{Members: []int{0, 1}}},
		{"one member", b, Config{Members: []int{0}}},
		{"too many", b, Config{Members: make([]int, MaxMembers+1)}},
		{"area past the block", b, Config{Members: []int{0, 1}, Area: b.Areas()}},
		{"negative area", b, Config{Members: []int{0, 1}, Area: -1}},
		{"member off the node", NewBlock(b.mem, 2, []int{0, -1, 1}), Config{Members: []int{0, 1}}},
	} {
		if g := NewGroup(c.b, c.cfg, h); g != nil {
			t.Errorf("%s: got a group", c.name)
		}
	}
	if NewBlock(make([]byte, 100), 2, nil) != nil || NewBlock(b.mem, 1, nil) != nil {
		t.Error("a block with no room for an area, or of one share")
	}
	if got := b.Areas(); got != 15 { // 64 KiB a share, as mpi's doc says
		t.Errorf("%d areas in 64 KiB a share, want 15", got)
	}
}

// unsafeBytes is mem's memory as bytes: an 8-byte aligned block.
func unsafeBytes(mem []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), len(mem)*8)
}
