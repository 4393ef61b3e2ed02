package mpi

import (
	"fmt"
	"testing"
)

// Collectives on communicators whose members are on hosts that differ:
// every member must choose the same algorithm, so none may choose by a
// property of its own host alone.

// TestAllreduceMixedOversub: in a job of three nodes of which only node 0
// runs more ranks than cores, Allreduces of 128 KiB (where an
// oversubscribed communicator keeps recursive doubling and another takes
// the ring) give exact results on the world (its leaders' step spans the
// nodes), on one rank per node, on each node alone and on the two nodes
// that are not oversubscribed; each member reads the same
// oversubscription of its communicator. Direct reads are off, as they
// are between hosts.
func TestAllreduceMixedOversub(t *testing.T) {
	t.Setenv("WEFT_DIRECT", "0")
	t.Setenv("WEFT_TIMEOUT", "20s")
	nodes := []int{0, 0, 2, 2, 4, 4}
	over := make([]bool, len(nodes))
	for r, n := range nodes {
		over[r] = n == 0
	}
	err := runLayout(t, nodes, false, func(c *Comm) error {
		c.w.agreeOversub(over) // as Init does with what every rank published
		me := c.Rank()
		alone, err := c.Split(nodes[me], me) // each node's ranks
		if err != nil {
			return err
		}
		perNode, err := c.Split(me%2, me) // one rank per node, flat
		if err != nil {
			return err
		}
		rest, err := c.Split(map[bool]int{true: 0, false: 1}[nodes[me] == 0], me) // nodes 2 and 4
		if err != nil {
			return err
		}
		comms := []struct {
			name string
			c    *Comm
			over bool
		}{{"world", c, true}, {"one per node", perNode, true}, {"one node", alone, over[me]}, {"two nodes", rest, over[me]}}
		for _, k := range comms {
			if got := k.c.oversubscribed(); got != k.over {
				return fmt.Errorf("%s: oversubscribed %v, want %v", k.name, got, k.over)
			}
			const m = 16 << 10 // 128 KiB of float64
			v := make([]float64, m)
			for e := range v {
				v[e] = float64(k.c.Rank()*3 + e%7)
			}
			if err := Allreduce(k.c, v, v, Sum); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
			q := k.c.Size()
			for e, x := range v {
				if want := float64(3*q*(q-1)/2 + q*(e%7)); x != want {
					return fmt.Errorf("%s: element %d = %v, want %v", k.name, e, x, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgreeOversub: a world keeps the ranks' oversubscription only when
// the nodes differ in it.
func TestAgreeOversub(t *testing.T) {
	w := &World{rank: 1}
	w.agreeOversub([]bool{true, true})
	if !w.oversub || w.oversubAt != nil {
		t.Errorf("all oversubscribed: oversub %v, oversubAt %v; want true, nil", w.oversub, w.oversubAt)
	}
	w.agreeOversub([]bool{true, false})
	if w.oversub || w.oversubAt == nil {
		t.Errorf("rank 0's node only: oversub %v, oversubAt %v; want false, both", w.oversub, w.oversubAt)
	}
}

// TestParseAddr: what a rank publishes at Init is read back, and a
// record not of its form is refused naming it.
func TestParseAddr(t *testing.T) {
	for _, over := range []bool{false, true} {
		node, o, addr, err := parseAddr(formatAddr(2, over, "10.0.0.1:5@x"), 4)
		if err != nil || node != 2 || o != over || addr != "10.0.0.1:5@x" {
			t.Errorf("oversub %v: got %d %v %q %v", over, node, o, addr, err)
		}
	}
	for _, v := range []string{"2@addr", "2,2@addr", "4,0@addr", "-1,0@addr", "x,1@addr", "2,0"} {
		if _, _, _, err := parseAddr(v, 4); err == nil {
			t.Errorf("parseAddr(%q) accepted", v)
		}
	}
}
