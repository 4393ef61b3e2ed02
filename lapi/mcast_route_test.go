package lapi

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// TestMulticastThroughRoute: over routes that reach a node's other rank
// through a reliable device and the other node's ranks through a lossy
// network that broadcasts, Multicast works (the route broadcasts on its
// network member): broadcasts from each rank to all four arrive exact,
// with each counter once; the root's own node-mate places stream frames
// that came through the network member (the route lets multicast frames
// through whichever member they come by), and nothing else arrives the
// wrong way.
func TestMulticastThroughRoute(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			j := newMixedJob(t, 4, faults.Spec{Seed: seed, Loss: 0.05, Reorder: 0.05, Dup: 0.02})
			defer j.close()
			for r, c := range j.ctxs {
				if !c.CanMulticast() {
					t.Fatalf("rank %d: CanMulticast false over a route with a broadcasting member", r)
				}
			}
			group := []hal.Rank{0, 1, 2, 3}
			for i, size := range []int{0, 5000, 300 << 10, 1 << 20} {
				root := (i + int(seed)) % 4
				mate := root ^ 1
				before := j.ctxs[mate].McastStats()
				mc := &collCase{id: seed<<8 | uint64(i), group: group, root: root}
				mc.setUp(j, size, seed*100+uint64(i))
				for g, r := range group {
					mc.called[g] = true
					err := j.ctxs[r].Multicast(group, root, mc.id, mc.bufs[g],
						McastOpts{Landed: mc.landed[g], Done: mc.done[g], All: mc.all[g]})
					if err != nil {
						t.Fatalf("multicast %d from %d, rank %d: %v", i, root, r, err)
					}
				}
				j.runSettled(t, func() bool {
					for g := range group {
						if mc.done[g].Value() < 1 && mc.done[g].err == nil {
							return false
						}
					}
					return mc.all[root].Value() == 1
				})
				for g, r := range group {
					if err := mc.done[g].err; err != nil {
						t.Fatalf("multicast %d (%d B) from %d, rank %d: %v", i, size, root, r, err)
					}
					if !bytes.Equal(mc.bufs[g], mc.want) {
						t.Fatalf("multicast %d (%d B) from %d: rank %d's buffer differs", i, size, root, r)
					}
					if mc.done[g].Value() != 1 {
						t.Errorf("multicast %d, rank %d: Done %d", i, r, mc.done[g].Value())
					}
				}
				after := j.ctxs[mate].McastStats()
				t.Logf("%d B from rank %d: its node-mate %d placed %d frames and repaired %d bytes", size, root, mate, after.Placed-before.Placed, after.RepairBytes-before.RepairBytes)
				if size >= 300<<10 && after.Placed == before.Placed {
					t.Errorf("%d B from rank %d: its node-mate %d placed no stream frame (all by repair): the route dropped them", size, root, mate)
				}
			}
			for r, c := range j.ctxs {
				if n := c.dev.Counters().Drops[hal.DropPeer].Load(); n != 0 {
					t.Errorf("rank %d: %d frames dropped as from the wrong member", r, n)
				}
			}
		})
	}
}

// TestMulticastThroughStripe: over stripes of two lossy networks that
// broadcast, Multicast works (the stripe broadcasts on its members in
// turn): broadcasts each way arrive exact, the receiver placing stream
// frames and repairing the rest.
func TestMulticastThroughStripe(t *testing.T) {
	j, _, _ := stripeJob(t)
	defer j.close()
	for r, c := range j.ctxs {
		if !c.CanMulticast() {
			t.Fatalf("rank %d: CanMulticast false over a stripe of broadcasting members", r)
		}
	}
	group := []hal.Rank{0, 1}
	for i, size := range []int{0, 5000, 300 << 10, 1 << 20} {
		root := i % 2
		before := j.ctxs[1-root].McastStats()
		mc := &collCase{id: uint64(i + 1), group: group, root: root}
		mc.setUp(j, size, uint64(i))
		for g, r := range group {
			mc.called[g] = true
			if err := j.ctxs[r].Multicast(group, root, mc.id, mc.bufs[g],
				McastOpts{Landed: mc.landed[g], Done: mc.done[g], All: mc.all[g]}); err != nil {
				t.Fatalf("multicast %d, rank %d: %v", i, r, err)
			}
		}
		j.runSettled(t, func() bool {
			return mc.done[0].Value()+mc.done[1].Value() == 2 || mc.done[0].err != nil || mc.done[1].err != nil
		})
		for g := range group {
			if err := mc.done[g].err; err != nil {
				t.Fatalf("multicast %d (%d B), rank %d: %v", i, size, g, err)
			}
			if !bytes.Equal(mc.bufs[g], mc.want) {
				t.Fatalf("multicast %d (%d B) from %d: rank %d's buffer differs", i, size, root, g)
			}
		}
		after := j.ctxs[1-root].McastStats()
		t.Logf("%d B from rank %d: placed %d frames, repaired %d bytes", size, root, after.Placed-before.Placed, after.RepairBytes-before.RepairBytes)
		if size >= 300<<10 && after.Placed == before.Placed {
			t.Errorf("%d B: the receiver placed no stream frame", size)
		}
	}
}
