package hal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// reintNode is one rank's device running the reintegration protocol.
type reintNode struct {
	r       *hal.Reintegration
	dev     hal.Device
	alive   bool
	next    time.Time
	started time.Time           // this incarnation's start
	cleared map[hal.Rank]uint64 // peer → its epoch when we last cleared it
	acts    []hal.ReintAction   // every action, in order
}

// reintNet drives n nodes over a simulated network, checking on every
// ActReady that all live peers cleared the joiner's state first.
type reintNet struct {
	t      *testing.T
	net    *simnet.Network
	nodes  []*reintNode
	cfg    hal.ReintConfig
	epochs uint64
	hdr    [hal.HeaderLen]byte
	pay    [hal.ReintPayloadLen]byte
}

func newReintNet(t *testing.T, n int, spec faults.Spec) *reintNet {
	net, err := simnet.New(n, spec)
	if err != nil {
		t.Fatal(err)
	}
	rn := &reintNet{t: t, net: net, cfg: hal.ReintConfig{Retry: 100 * time.Microsecond, MaxTries: 20}}
	for i := 0; i < n; i++ {
		rn.nodes = append(rn.nodes, &reintNode{dev: net.Device(hal.Rank(i))})
	}
	return rn
}

// start (re)starts rank i with a fresh incarnation.
func (rn *reintNet) start(i int) {
	nd := rn.nodes[i]
	rn.epochs++
	nd.r = hal.NewReintegration(hal.Rank(i), len(rn.nodes), rn.epochs<<8|uint64(i), rn.cfg)
	nd.alive = true
	nd.started = rn.net.Now()
	nd.cleared = map[hal.Rank]uint64{}
	msgs, acts := nd.r.Start(rn.net.Now())
	rn.apply(i, msgs, acts)
}

func (rn *reintNet) apply(i int, msgs []hal.ReintMsg, acts []hal.ReintAction) {
	nd := rn.nodes[i]
	nd.acts = append(nd.acts, acts...)
	for _, a := range acts {
		switch a.Kind {
		case hal.ActClearPeer:
			nd.cleared[a.Peer] = rn.nodes[a.Peer].r.Epoch()
		case hal.ActReady:
			// Safety: before RDMA turns on here, every live peer has
			// cleared what it knew of this rank, or is itself a life
			// started after this one (a crossing BOOTING), which knows
			// nothing of this rank's earlier lives.
			for p, q := range rn.nodes {
				fresh := !q.started.Before(nd.started)
				if p != i && q.alive && q.r != nil && q.cleared[hal.Rank(i)] != nd.r.Epoch() && !fresh && !gaveUp(acts, p) {
					rn.t.Fatalf("rank %d ready (epoch %x) before rank %d cleared it", i, nd.r.Epoch(), p)
				}
			}
		}
	}
	for _, m := range msgs {
		h := hal.Header{Type: m.Type, JobKey: simnet.DefaultJobKey, Src: hal.Rank(i), Dst: m.Peer, Len: hal.ReintPayloadLen}
		hal.EncodeHeader(rn.hdr[:], &h)
		hal.EncodeReint(rn.pay[:], m)
		hal.Seal(rn.hdr[:], rn.pay[:])
		if err := nd.dev.Send(rn.hdr[:], rn.pay[:]); err != nil {
			rn.t.Fatalf("rank %d send: %v", i, err)
		}
		nd.dev.Flush()
	}
}

func gaveUp(acts []hal.ReintAction, p int) bool {
	for _, a := range acts {
		if a.Kind == hal.ActGaveUp && a.Peer == hal.Rank(p) {
			return true
		}
	}
	return false
}

// run steps the network until done or the virtual time limit.
func (rn *reintNet) run(limit time.Duration, done func() bool) {
	end := rn.net.Now().Add(limit)
	for !done() {
		for i, nd := range rn.nodes {
			if !nd.alive {
				continue
			}
			nd.dev.Poll(func(h *hal.Header, p []byte) {
				msgs, acts := nd.r.Handle(h.Src, h.Type, p, rn.net.Now())
				rn.apply(i, msgs, acts)
			})
			msgs, acts, next := nd.r.Tick(rn.net.Now())
			rn.apply(i, msgs, acts)
			nd.next = next
		}
		if done() {
			return
		}
		next, ok := rn.net.NextEvent()
		for _, nd := range rn.nodes {
			if nd.alive && !nd.next.IsZero() && (!ok || nd.next.Before(next)) {
				next, ok = nd.next, true
			}
		}
		if !ok || rn.net.Now().After(end) {
			rn.t.Fatalf("not converged after %v (nothing pending: %v)", limit, !ok)
		}
		rn.net.Advance(next.Sub(rn.net.Now()))
	}
}

// converged: every live rank is ready and allows RDMA to every live peer.
func (rn *reintNet) converged() bool {
	for i, nd := range rn.nodes {
		if !nd.alive {
			continue
		}
		if !nd.r.Ready() {
			return false
		}
		for p, q := range rn.nodes {
			if p != i && q.alive && !nd.r.RDMATo(hal.Rank(p)) {
				return false
			}
		}
	}
	return true
}

// TestReintegrationTogether: every rank starts at once, so BOOTINGs cross;
// under loss, reordering, duplication and corruption all converge.
func TestReintegrationTogether(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			spec := faults.Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.01, Delay: 50 * time.Microsecond, Seed: seed}
			rn := newReintNet(t, 5, spec)
			for i := range rn.nodes {
				rn.start(i)
			}
			rn.run(time.Second, rn.converged)
		})
	}
}

// TestReintegrationHeavyLoss: with the retry counts lapi uses (the
// defaults) and half of all frames lost, every pair still converges:
// RDMA_READY is resent until answered, and a live peer is not given up on.
func TestReintegrationHeavyLoss(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rn := newReintNet(t, 6, faults.Spec{Loss: 0.5, Dup: 0.05, Corrupt: 0.05, Seed: seed})
			rn.cfg = hal.ReintConfig{Retry: 100 * time.Microsecond}
			for i := range rn.nodes {
				rn.start(i)
			}
			rn.run(time.Second, rn.converged)
		})
	}
}

// TestReintegrationRestart: a rank restarts in a running job (and, in the
// second case, crashes again in the middle of BOOTING): peers stop RDMA
// toward it and clear it before it turns RDMA on, then re-enable.
func TestReintegrationRestart(t *testing.T) {
	for _, crashMidBoot := range []bool{false, true} {
		t.Run(fmt.Sprint("crash-mid-boot=", crashMidBoot), func(t *testing.T) {
			rn := newReintNet(t, 4, faults.Spec{Loss: 0.1, Dup: 0.05, Seed: 5})
			for i := range rn.nodes {
				rn.start(i)
			}
			rn.run(time.Second, rn.converged)
			rn.start(2)
			if crashMidBoot {
				rn.net.Advance(20 * time.Microsecond) // some BOOTINGs out
				rn.start(2)                           // and a new life before any answer
			}
			rn.run(time.Second, rn.converged)
			for p, nd := range rn.nodes {
				if p != 2 && nd.cleared[2] != rn.nodes[2].r.Epoch() {
					t.Errorf("rank %d never cleared rank 2's latest incarnation", p)
				}
			}
		})
	}
}

// TestReintegrationDeadPeer: a rank that is down while the others join is
// counted as answered after its retries; when it comes back it joins, and
// everyone allows RDMA to and from it.
func TestReintegrationDeadPeer(t *testing.T) {
	rn := newReintNet(t, 3, faults.Spec{})
	if err := rn.net.Kill(2); err != nil {
		t.Fatal(err)
	}
	rn.start(0)
	rn.start(1)
	rn.run(time.Second, rn.converged)
	dev, err := rn.net.Restart(2)
	if err != nil {
		t.Fatal(err)
	}
	rn.nodes[2].dev = dev
	rn.start(2)
	rn.run(time.Second, rn.converged)
}

// TestReintOwedReady: a peer that announced RDMA_READY (asking for one
// back) while this rank was still joining gets its answer the moment this
// rank is ready, without waiting for its own retry timer: over a reliable
// device a driver may sleep with no timer running.
func TestReintOwedReady(t *testing.T) {
	now := time.Unix(0, 0)
	// Rank 1 of 3 joins; rank 0 is ready already; rank 2 has not answered.
	r := hal.NewReintegration(1, 3, 11, hal.ReintConfig{})
	r.Start(now)
	pay := func(ep uint64, ask bool) []byte {
		b := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(b, hal.ReintMsg{Epoch: ep, Ask: ask})
		return b
	}
	r.Handle(0, hal.FrameBootAck, pay(11, false), now)
	out, _ := r.Handle(0, hal.FrameRDMAReady, pay(7, true), now) // rank 0 (epoch 7) asks
	if len(out) != 0 || r.Ready() {
		t.Fatalf("answered before ready: %+v", out)
	}
	out, acts := r.Handle(2, hal.FrameBootAck, pay(11, false), now)
	var toZero, ready bool
	for _, m := range out {
		toZero = toZero || m.Type == hal.FrameRDMAReady && m.Peer == 0
	}
	for _, a := range acts {
		ready = ready || a.Kind == hal.ActReady
	}
	if !ready || !toZero {
		t.Fatalf("on becoming ready: actions %+v, frames %+v: want hal.ActReady and an RDMA_READY to rank 0", acts, out)
	}
}

// TestReintNack: a device that is shutting down (Refuse) answers BOOTING
// with BOOT_NACK carrying the joiner's incarnation; the joiner counts it
// as answered, reports ActRefused once, becomes ready when the others
// answer, and does not allow RDMA toward the refusing peer. A NACK of an
// earlier incarnation is ignored.
func TestReintNack(t *testing.T) {
	now := time.Unix(0, 0)
	pay := func(ep uint64) []byte {
		b := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(b, hal.ReintMsg{Epoch: ep})
		return b
	}
	going := hal.NewReintegration(0, 3, 5, hal.ReintConfig{})
	going.Start(now)
	going.Refuse()
	out, acts := going.Handle(1, hal.FrameBooting, pay(11), now)
	if len(out) != 1 || out[0].Type != hal.FrameBootNack || out[0].Peer != 1 || out[0].Epoch != 11 || len(acts) != 0 {
		t.Fatalf("a refusing device answered BOOTING with %+v and did %+v; want one BOOT_NACK to rank 1 of epoch 11", out, acts)
	}

	joiner := hal.NewReintegration(1, 3, 11, hal.ReintConfig{})
	joiner.Start(now)
	if _, acts := joiner.Handle(0, hal.FrameBootNack, pay(10), now); len(acts) != 0 {
		t.Errorf("a NACK of another incarnation acted: %+v", acts)
	}
	_, acts = joiner.Handle(0, hal.FrameBootNack, pay(11), now)
	if len(acts) != 1 || acts[0].Kind != hal.ActRefused || acts[0].Peer != 0 {
		t.Fatalf("NACK from rank 0: actions %+v, want ActRefused for rank 0", acts)
	}
	if _, acts := joiner.Handle(0, hal.FrameBootNack, pay(11), now); len(acts) != 0 {
		t.Errorf("a repeated NACK acted again: %+v", acts)
	}
	_, acts = joiner.Handle(2, hal.FrameBootAck, pay(11), now)
	ready := false
	for _, a := range acts {
		ready = ready || a.Kind == hal.ActReady
	}
	if !ready || !joiner.Ready() {
		t.Fatalf("all peers answered (one NACK, one ACK) but not ready: %+v", acts)
	}
	if joiner.RDMATo(0) {
		t.Error("RDMA allowed toward the peer that refused the join")
	}
}
