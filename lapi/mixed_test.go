package lapi

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
	"github.com/weft-hpc/weft/route"
)

// nodeDevice is a lossless simulated device presented as reliable and
// ordered, as shared memory is, under its own address scheme so that a
// route can hold it beside the lossy network's device. The simulated
// network checks every frame's CRC, so it seals a copy of each header
// (a reliable device's user does not).
type nodeDevice struct{ hal.Device }

func (d nodeDevice) Caps() hal.Caps {
	c := d.Device.Caps()
	c.Reliable, c.Ordered = true, true
	return c
}

func (d nodeDevice) Addr() string { return "node" + d.Device.Addr() }

func (d nodeDevice) Connect(peer hal.Rank, addr string) error {
	return d.Device.Connect(peer, strings.TrimPrefix(addr, "node"))
}

func (d nodeDevice) Send(hdr, payload []byte) error {
	h := append([]byte(nil), hdr...)
	hal.Seal(h, payload)
	return d.Device.Send(h, payload)
}

// newMixedJob is a job of n ranks on nodes of two ranks (rank r on node
// r/2), each rank's device a route: a lossless reliable network with a
// large MTU toward its node's rank, and a network injecting spec with a
// 1,400-byte MTU toward the others, both on one virtual clock.
func newMixedJob(t *testing.T, n int, spec faults.Spec) *simJob {
	t.Helper()
	lossy, err := simnet.New(n, spec, simnet.WithMTU(1400))
	if err != nil {
		t.Fatal(err)
	}
	node, err := simnet.New(n, faults.Spec{}, simnet.WithMTU(16<<10))
	if err != nil {
		t.Fatal(err)
	}
	j := &simJob{t: t, net: lossy, node: node}
	devs := make([]*route.Device, n)
	for r := range n {
		via := make([]int, n)
		for p := range via {
			if p/2 != r/2 {
				via[p] = 1
			}
		}
		d, err := route.New([]hal.Device{nodeDevice{node.Device(hal.Rank(r))}, lossy.Device(hal.Rank(r))}, via, route.Options{PollAll: true})
		if err != nil {
			t.Fatal(err)
		}
		devs[r] = d
	}
	for r, d := range devs {
		for p, pd := range devs {
			if p != r {
				if err := d.Connect(hal.Rank(p), pd.Addr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		c, err := Open(Config{Device: d, Rank: hal.Rank(r), Size: n, JobKey: simnet.DefaultJobKey,
			Clock: lossy.Now, PeerTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		j.ctxs = append(j.ctxs, c)
	}
	return j
}

// TestMixedRoute: over routes that reach a node's other rank through a
// reliable device and the other node's ranks through a hostile one,
// messages of 0 B to 1 MiB (rendezvous and RDMA toward the reliable peer,
// packets toward the others) each arrive exactly once, intact; sequence
// numbers and acknowledgements run toward the lossy peers only, and the
// reliable device carries the node's traffic with no CRC to check.
func TestMixedRoute(t *testing.T) {
	seeds, msgs := 6, 4000
	if testing.Short() {
		seeds, msgs = 2, 800
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			spec := hostile
			spec.Seed = seed
			j := newMixedJob(t, 4, spec)
			c0 := j.ctxs[0]
			if c0.reliable || !c0.reliableTo(1) || c0.reliableTo(2) || c0.mtuOf(1) != 16<<10 || c0.mtuOf(2) != 1400 {
				t.Fatalf("rank 0: reliable %v, toward 1 %v/%d, toward 2 %v/%d", c0.reliable,
					c0.reliableTo(1), c0.mtuOf(1), c0.reliableTo(2), c0.mtuOf(2))
			}
			nodeSent := j.node.Device(0).Counters()
			t.Log(amStormOn(t, j, seed, msgs, 1<<20, spec))
			if nodeSent.FramesSent.Load() == 0 {
				t.Errorf("rank 0 sent nothing through its node's device")
			}
			for r, c := range j.ctxs {
				mate := r ^ 1
				if l := &c.links[mate]; l.nextSeq != 0 || l.cum != 0 {
					t.Errorf("rank %d numbered packets toward its node's rank %d: next %d, cum %d", r, mate, l.nextSeq, l.cum)
				}
				if l := &c.links[(r+2)%4]; l.nextSeq == 0 {
					t.Errorf("rank %d sent rank %d no numbered packet", r, (r+2)%4)
				}
			}
		})
	}
}
