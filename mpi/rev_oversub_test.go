package mpi

import (
	"fmt"
	"testing"
)

// TestRevOversubMixedNodes: Init sets World.oversub per node (more ranks
// on this host than its cores: devices.Oversubscribed), so in a job whose
// nodes differ (one oversubscribed, the others not) the ranks of one
// communicator disagree on it. Allreduce picks its algorithm with it
// (coll.go: the ring from 64 KiB, or from 256 KiB when oversubscribed),
// so between 64 and 256 KiB the leaders of a node-aware Allreduce (and
// any flat communicator spanning such nodes) run different algorithms
// against each other. Here node 0 is oversubscribed, nodes 2 and 4 not;
// direct reads are off, as they are between hosts (World.far).
func TestRevOversubMixedNodes(t *testing.T) {
	t.Setenv("WEFT_DIRECT", "0")
	t.Setenv("WEFT_TIMEOUT", "20s")
	nodes := []int{0, 0, 2, 2, 4, 4}
	err := runLayout(t, nodes, false, func(c *Comm) error {
		c.w.oversub = nodes[c.Rank()] == 0 // as Init would find it on each host
		p, me := c.Size(), c.Rank()
		const m = 16 << 10 // 128 KiB of float64
		// The world (node-aware: its leaders' Allreduce), and a
		// communicator of one rank per node (flat).
		s, err := c.Split(me%2, me)
		if err != nil {
			return err
		}
		for _, comm := range []*Comm{c, s} {
			v := make([]float64, m)
			for e := range v {
				v[e] = float64(comm.Rank()*3 + e%7)
			}
			if err := Allreduce(comm, v, v, Sum); err != nil {
				return fmt.Errorf("rank %d of %d (comm of %d): %w", me, p, comm.Size(), err)
			}
			q := comm.Size()
			for e, x := range v {
				if want := float64(3*q*(q-1)/2 + q*(e%7)); x != want {
					return fmt.Errorf("rank %d (comm of %d): element %d = %v, want %v", me, q, e, x, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
