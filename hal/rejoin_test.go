package hal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// count is how many of nd's actions since from are of kind k about peer.
func count(nd *reintNode, from int, k hal.ReintActionKind, peer hal.Rank) int {
	n := 0
	for _, a := range nd.acts[from:] {
		if a.Kind == k && a.Peer == peer {
			n++
		}
	}
	return n
}

// rejoin has rank i rejoin peer under epoch.
func (rn *reintNet) rejoin(i int, peer hal.Rank, epoch uint64) {
	msgs, acts := rn.nodes[i].r.Rejoin(peer, epoch, rn.net.Now())
	rn.apply(i, msgs, acts)
}

// TestReintRejoin: in a joined job, rank 0 rejoins rank 1 alone (and, in
// the crossing case, rank 1 rejoins rank 0 at the same moment), under
// loss, duplication and reordering: RDMA between them is off until both
// have said RDMA_READY of the new incarnations, each ends knowing the
// other's newest, and rank 2 sees nothing of it.
func TestReintRejoin(t *testing.T) {
	for _, crossing := range []bool{false, true} {
		for seed := uint64(1); seed <= 50; seed++ {
			t.Run(fmt.Sprintf("crossing=%v/%d", crossing, seed), func(t *testing.T) {
				spec := faults.Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Delay: 50 * time.Microsecond, Seed: seed}
				rn := newReintNet(t, 3, spec)
				for i := range rn.nodes {
					rn.start(i)
				}
				rn.run(time.Second, rn.converged)
				n0, n1, n2 := rn.nodes[0], rn.nodes[1], rn.nodes[2]
				mark0, mark1, mark2 := len(n0.acts), len(n1.acts), len(n2.acts)
				rn.rejoin(0, 1, 1001)
				if crossing {
					rn.rejoin(1, 0, 2001)
				}
				if n0.r.RDMATo(1) || !n0.r.Rejoining(1) || !n0.r.RDMATo(2) {
					t.Fatalf("rank 0 after Rejoin(1): RDMA to 1 %v, rejoining %v, RDMA to 2 %v; want off, yes, on",
						n0.r.RDMATo(1), n0.r.Rejoining(1), n0.r.RDMATo(2))
				}
				rn.run(time.Second, func() bool {
					return !n0.r.Rejoining(1) && !n1.r.Rejoining(0) && rn.converged()
				})
				// A BOOTING from before the Rejoin, delayed on the wire,
				// may be taken for a new incarnation and cleared too;
				// what counts is that the last one known is the new one.
				if got := count(n1, mark1, hal.ActClearPeer, 0); got < 1 || n1.r.PeerEpoch(0) != 1001 {
					t.Errorf("rank 1 cleared rank 0 %d times and knows it as %d, want at least once and 1001", got, n1.r.PeerEpoch(0))
				}
				if got := count(n1, mark1, hal.ActEnablePeer, 0); got < 1 {
					t.Errorf("rank 1 never re-enabled rank 0")
				}
				if got := count(n0, mark0, hal.ActClearPeer, 1); crossing && (got < 1 || n0.r.PeerEpoch(1) != 2001) {
					t.Errorf("crossing: rank 0 cleared rank 1 %d times and knows it as %d, want at least once and 2001", got, n0.r.PeerEpoch(1))
				} else if !crossing && got != 0 {
					t.Errorf("rank 0 cleared rank 1, which did not restart or rejoin, %d times", got)
				}
				if count(n0, mark0, hal.ActEnablePeer, 1) < 1 {
					t.Errorf("rank 0 never re-enabled rank 1 after its Rejoin")
				}
				if len(n2.acts) != mark2 {
					t.Errorf("rank 2 acted on a rejoin between ranks 0 and 1: %+v", n2.acts[mark2:])
				}
				if got := count(n0, mark0, hal.ActGaveUp, 1) + count(n0, mark0, hal.ActRefused, 1); got != 0 {
					t.Errorf("rank 0 gave up on or was refused by rank 1 %d times", got)
				}
			})
		}
	}
}

// TestReintRejoinDeadPeer: a Rejoin toward a peer that never answers gives
// it up after MaxTries BOOTINGs (ActGaveUp, once), leaves RDMA toward it
// off, and then sends it nothing more (Tick has nothing pending); a later
// Rejoin, once it is back, succeeds.
func TestReintRejoinDeadPeer(t *testing.T) {
	rn := newReintNet(t, 3, faults.Spec{Seed: 3})
	for i := range rn.nodes {
		rn.start(i)
	}
	rn.run(time.Second, rn.converged)
	n0 := rn.nodes[0]
	rn.net.Isolate(2)
	mark := len(n0.acts)
	rn.rejoin(0, 2, 77)
	rn.run(time.Second, func() bool { return !n0.r.Rejoining(2) })
	if got := count(n0, mark, hal.ActGaveUp, 2); got != 1 || n0.r.RDMATo(2) {
		t.Fatalf("gave up on the isolated rank %d times (RDMA to it %v), want once and off", got, n0.r.RDMATo(2))
	}
	if _, _, next := n0.r.Tick(rn.net.Now().Add(time.Hour)); !next.IsZero() {
		t.Errorf("after giving up, Tick still wants a call at %v", next)
	}
	rn.net.HealAll()
	rn.rejoin(0, 2, 78)
	rn.run(time.Second, func() bool { return !n0.r.Rejoining(2) && rn.converged() })
}

// TestReintRejoinStale: a Joined device (grown to a second rank) has
// nothing to send; answers to an earlier incarnation do not complete
// a Rejoin: a BOOT_ACK of the old epoch is ignored, and an RDMA_READY from
// the peer before its ACK (it may have left before our BOOTING arrived) is
// not taken; the one after it ends the Rejoin.
func TestReintRejoinStale(t *testing.T) {
	now := time.Unix(0, 0)
	pay := func(ep uint64, ask bool) []byte {
		b := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(b, hal.ReintMsg{Epoch: ep, Ask: ask})
		return b
	}
	r := hal.NewReintegration(0, 1, 5, hal.ReintConfig{})
	r.Joined()
	r.Grow(2)
	if !r.Ready() || !r.RDMATo(1) {
		t.Fatal("Joined, then grown: not ready toward rank 1")
	}
	if out, _, next := r.Tick(now.Add(time.Hour)); len(out) != 0 || !next.IsZero() {
		t.Fatalf("Joined: Tick sent %+v and wants a call at %v, want nothing pending", out, next)
	}
	out, _ := r.Rejoin(1, 6, now)
	if len(out) != 1 || out[0].Type != hal.FrameBooting || out[0].Epoch != 6 {
		t.Fatalf("Rejoin sent %+v, want one BOOTING of epoch 6", out)
	}
	if out, _ := r.Handle(1, hal.FrameBootAck, pay(5, false), now); len(out) != 0 || !r.Rejoining(1) {
		t.Fatalf("an ACK of the old incarnation answered the Rejoin: %+v", out)
	}
	r.Handle(1, hal.FrameRDMAReady, pay(9, false), now)
	if !r.Rejoining(1) {
		t.Fatal("an RDMA_READY before the ACK ended the Rejoin")
	}
	out, _ = r.Handle(1, hal.FrameBootAck, pay(6, false), now)
	if len(out) != 1 || out[0].Type != hal.FrameRDMAReady || out[0].Epoch != 6 || !out[0].Ask {
		t.Fatalf("the ACK of epoch 6 sent %+v, want RDMA_READY of epoch 6 asking back", out)
	}
	if !r.Rejoining(1) || r.RDMATo(1) {
		t.Fatal("the RDMA_READY that came before the ACK counted")
	}
	r.Handle(1, hal.FrameRDMAReady, pay(9, false), now)
	if r.Rejoining(1) || !r.RDMATo(1) {
		t.Fatalf("ACK and then RDMA_READY in, still rejoining %v, RDMA to 1 %v", r.Rejoining(1), r.RDMATo(1))
	}
}

// exchange delivers msgs from one device to the other, and what that
// answers back, until nothing is left to send (a lossless wire).
func exchange(t *testing.T, devs [2]*hal.Reintegration, from int, msgs []hal.ReintMsg, now time.Time) {
	t.Helper()
	type pending struct {
		from int
		m    hal.ReintMsg
	}
	var q []pending
	for _, m := range msgs {
		q = append(q, pending{from, m})
	}
	for n := 0; len(q) > 0; n++ {
		if n > 100 {
			t.Fatal("the exchange does not end")
		}
		p := q[0]
		q = q[1:]
		var b [hal.ReintPayloadLen]byte
		hal.EncodeReint(b[:], p.m)
		to := 1 - p.from
		out, _ := devs[to].Handle(hal.Rank(p.from), p.m.Type, b[:], now)
		for _, m := range out {
			q = append(q, pending{to, m})
		}
	}
}

// TestReintRejoinAfterPeerRestart: two stripe members (Joined, as package
// stripe makes them). Rank 0's member rejoins rank 1 once; then rank 1
// restarts as a whole (a new process: its member is Joined afresh under a
// new incarnation, which it never sent in a BOOTING) and rank 0's member
// rejoins it again. Both rejoins end (Rejoining false, RDMATo true) on a
// lossless wire: rank 1 announces its new incarnation with a BOOTING of
// its own when it answers, so rank 0 does not take its RDMA_READY for one
// of its earlier life.
func TestReintRejoinAfterPeerRestart(t *testing.T) {
	now := time.Unix(1, 0)
	cfg := hal.ReintConfig{Retry: time.Millisecond, MaxTries: 20}
	a := hal.NewReintegration(0, 2, 0x10, cfg)
	a.Joined()
	b := hal.NewReintegration(1, 2, 0x21, cfg)
	b.Joined()
	devs := [2]*hal.Reintegration{a, b}
	msgs, _ := a.Rejoin(1, 0x30, now)
	exchange(t, devs, 0, msgs, now)
	if a.Rejoining(1) || !a.RDMATo(1) {
		t.Fatalf("first rejoin did not end: rejoining %v, RDMA to rank 1 %v", a.Rejoining(1), a.RDMATo(1))
	}
	// Rank 1 restarts.
	b = hal.NewReintegration(1, 2, 0x41, cfg)
	b.Joined()
	devs[1] = b
	msgs, _ = a.Rejoin(1, 0x50, now)
	exchange(t, devs, 0, msgs, now)
	for range 5 { // the timers too, on a lossless wire
		now = now.Add(time.Second)
		msgs, _, _ := a.Tick(now)
		exchange(t, devs, 0, msgs, now)
	}
	if a.Rejoining(1) || !a.RDMATo(1) {
		t.Errorf("rejoin toward the restarted rank 1 never ends: rejoining %v, RDMA to it %v; rank 0 holds its incarnation %#x, it is %#x",
			a.Rejoining(1), a.RDMATo(1), a.PeerEpoch(1), b.Epoch())
	}
}

// TestReintAnswerAsksBack: the end that answers a Rejoin's RDMA_READY
// marks its answer as one and asks back, and learns that the rejoining end
// has its RDMA_READY (RDMAFrom) only from that end's answer: a stripe
// member holds data until then, since the rejoining end refuses data on a
// stale link until it has the RDMA_READY.
func TestReintAnswerAsksBack(t *testing.T) {
	now := time.Unix(0, 0)
	pay := func(m hal.ReintMsg) []byte {
		b := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(b, m)
		return b
	}
	a := hal.NewReintegration(0, 2, 5, hal.ReintConfig{})
	a.Joined()
	b := hal.NewReintegration(1, 2, 7, hal.ReintConfig{})
	b.Joined()
	a.Rejoin(1, 6, now)
	b.Handle(0, hal.FrameBooting, pay(hal.ReintMsg{Epoch: 6}), now)
	out, _ := a.Handle(1, hal.FrameBootAck, pay(hal.ReintMsg{Epoch: 6}), now)
	if len(out) != 1 || out[0].Type != hal.FrameRDMAReady || !out[0].Ask || out[0].Answer {
		t.Fatalf("rank 0's BOOT_ACK in: sent %+v, want an RDMA_READY asking back", out)
	}
	out, _ = b.Handle(0, hal.FrameRDMAReady, pay(out[0]), now)
	var ans hal.ReintMsg
	for _, m := range out {
		if m.Type == hal.FrameRDMAReady {
			ans = m
		}
	}
	if !ans.Answer || !ans.Ask || !b.RDMATo(0) || b.RDMAFrom(0) {
		t.Fatalf("rank 1 answered %+v (RDMA to 0 %v, from 0 %v), want an answer asking back, RDMA to rank 0 on, from it not yet known",
			out, b.RDMATo(0), b.RDMAFrom(0))
	}
	if _, _, next := b.Tick(now); next.IsZero() {
		t.Error("rank 1 does not resend its RDMA_READY until it is answered")
	}
	out, _ = a.Handle(1, hal.FrameRDMAReady, pay(ans), now)
	if a.Rejoining(1) || !a.RDMATo(1) || !a.RDMAFrom(1) || len(out) != 1 || !out[0].Answer || out[0].Ask {
		t.Fatalf("rank 0 took rank 1's answer: rejoining %v, RDMA to 1 %v, from 1 %v, sent %+v; want done and one answer that asks nothing",
			a.Rejoining(1), a.RDMATo(1), a.RDMAFrom(1), out)
	}
	b.Handle(0, hal.FrameRDMAReady, pay(out[0]), now)
	if !b.RDMAFrom(0) {
		t.Fatal("rank 0's answer in, rank 1 still does not know it has its RDMA_READY")
	}
	if _, _, next := b.Tick(now); !next.IsZero() {
		t.Errorf("both answered, rank 1 still wants a Tick at %v", next)
	}
}

// TestReintOldBooting: a BOOTING of the incarnation that a peer's current
// one replaced, delayed on the wire, is from a life that is over: it
// clears nothing, and the peer stays known by its current incarnation.
func TestReintOldBooting(t *testing.T) {
	now := time.Unix(0, 0)
	pay := func(ep uint64) []byte {
		b := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(b, hal.ReintMsg{Epoch: ep})
		return b
	}
	r := hal.NewReintegration(0, 2, 5, hal.ReintConfig{})
	r.Joined()
	r.Handle(1, hal.FrameBooting, pay(10), now)
	if _, acts := r.Handle(1, hal.FrameBooting, pay(11), now); len(acts) != 1 || acts[0].Kind != hal.ActClearPeer {
		t.Fatalf("a new incarnation's BOOTING: actions %+v, want ActClearPeer", acts)
	}
	if out, acts := r.Handle(1, hal.FrameBooting, pay(10), now); len(acts) != 0 || len(out) != 0 || r.PeerEpoch(1) != 11 {
		t.Errorf("the replaced incarnation's BOOTING: sent %+v, did %+v, peer known as %d; want nothing, and 11", out, acts, r.PeerEpoch(1))
	}
}

// TestReintRestartIgnoresEarlierLifesReady: a device restarted as a whole
// (Start) takes no RDMA_READY from a peer before the peer has answered its
// BOOTING: one that comes first was sent to its earlier life (here the
// answer to that life's RDMA_READY, still on its way at the restart).
// Taken, it marked the peer ready, so the new life never sent the peer
// its own RDMA_READY, and the peer, which waits for it, never enabled RDMA
// toward the new life (TestRestartedPeerMessages in mpi hung in its join).
func TestReintRestartIgnoresEarlierLifesReady(t *testing.T) {
	now := time.Unix(0, 0)
	pay := func(ep uint64, flags byte) []byte {
		b := make([]byte, hal.ReintPayloadLen)
		hal.EncodeReint(b, hal.ReintMsg{Epoch: ep})
		b[8] = flags
		return b
	}
	r := hal.NewReintegration(1, 2, 99, hal.ReintConfig{})
	r.Start(now)
	_, acts := r.Handle(0, hal.FrameRDMAReady, pay(1, 2), now) // an answer meant for the earlier life
	for _, a := range acts {
		if a.Kind == hal.ActEnablePeer {
			t.Fatal("the peer enabled by an RDMA_READY sent before it answered our BOOTING")
		}
	}
	out, _ := r.Handle(0, hal.FrameBootAck, pay(99, 0), now)
	sent := false
	for _, m := range out {
		sent = sent || m.Type == hal.FrameRDMAReady && m.Peer == 0 && m.Epoch == 99
	}
	if !r.Ready() || !sent {
		t.Fatalf("after the BOOT_ACK: ready %v, sent %+v; want ready and an RDMA_READY of 99 to the peer", r.Ready(), out)
	}
	r.Handle(0, hal.FrameRDMAReady, pay(1, 2), now)
	if !r.RDMATo(0) {
		t.Fatal("the peer's RDMA_READY after its BOOT_ACK did not enable RDMA toward it")
	}
}
