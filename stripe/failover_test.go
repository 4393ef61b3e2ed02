package stripe

import (
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// Timings of the failure tests, in the fabric's virtual time.
var testOpts = Options{Silence: 20 * time.Millisecond, Probe: 5 * time.Millisecond, SilenceFrames: 8}

// pingPong is a mesh of two ranks that also records, per rank, when
// member 1 was first seen out and when back in afterwards.
type pingPong struct {
	*mesh
	outAt   [2]time.Time // when each rank first saw member 1 out
	inAt    [2]time.Time // when each rank saw it back in afterwards
	sentOn1 [2]uint64    // member 1's FramesSent when it came back in
	sentOut [2]uint64    // member 1's FramesSent when it was first seen out
}

func newPingPong(t *testing.T, f *fabric, s []*Device) *pingPong {
	p := &pingPong{mesh: newMesh(t, f, s)}
	p.afterTick = p.watch
	return p
}

// watch records member 1's changes at each rank.
func (p *pingPong) watch() {
	for r, s := range p.s {
		m := s.Member(1)
		switch {
		case !m.In && p.outAt[r].IsZero():
			p.outAt[r] = p.f.now()
			p.sentOut[r] = m.FramesSent
		case m.In && !p.outAt[r].IsZero() && p.inAt[r].IsZero():
			p.inAt[r] = p.f.now()
			p.sentOn1[r] = m.FramesSent
		}
	}
}

// One member's network drops everything from a given moment: both ranks
// take it out within Silence, every frame sent after that arrives on the
// survivor exactly once, and when the network heals the member is
// re-admitted after reintegration with the peer, counted, and carries
// frames again.
func TestFailoverAndReadmission(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s := f.stripes(t, testOpts)
	p := newPingPong(t, f, s)
	start := f.now()
	failAt, healAt, end := start.Add(50*time.Millisecond), start.Add(150*time.Millisecond), start.Add(250*time.Millisecond)
	failed, healed := false, false
	p.run(end, func(now time.Time) {
		if !failed && !now.Before(failAt) {
			t.Logf("# %v: network 1 drops everything", now.Sub(start))
			f.nets[1].Isolate(0)
			failed = true
		}
		if !healed && !now.Before(healAt) {
			t.Logf("# %v: network 1 heals", now.Sub(start))
			f.nets[1].HealAll()
			healed = true
		}
	})
	for r := range 2 {
		m := s[r].Member(1)
		t.Logf("rank %d: out at %v, in at %v; %v", r, p.outAt[r].Sub(start), p.inAt[r].Sub(start), m)
		t.Logf("rank %d: %v", r, s[r].Member(0))
		// "A member that delivered nothing for Silence while another
		// member delivered at least SilenceFrames is taken out."
		if p.outAt[r].IsZero() || p.outAt[r].Before(failAt) || p.outAt[r].Sub(failAt) > testOpts.Silence+2*p.tick {
			t.Errorf("rank %d: member 1 out at %v, want within %v of the failure at %v",
				r, p.outAt[r].Sub(start), testOpts.Silence, failAt.Sub(start))
		}
		// Both ends judge with the same Silence: the peer's report that
		// it hears nothing may come before this end's own judgement.
		if m.Reason != ReasonSilence && m.Reason != ReasonPeerDeaf || m.Outs != 1 {
			t.Errorf("rank %d: member 1 taken out %d times, last for %v; want once, for silence or the peer's report", r, m.Outs, m.Reason)
		}
		// It rejoins when the peer is heard on it again and reports
		// hearing us (two probe rounds, the first to be heard and the
		// second to say so), and is back in after the reintegration
		// (BOOTING, BOOT_ACK, RDMA_READY both ways: two round trips,
		// a few ticks here).
		if p.inAt[r].IsZero() || p.inAt[r].Sub(healAt) > 2*testOpts.Probe+8*p.tick || m.Ins != 1 || m.Rejoins < 1 || !m.In {
			t.Errorf("rank %d: member 1 back in at %v (ins %d, rejoins %d, in %v), want after a reintegration within two probe intervals of the heal at %v",
				r, p.inAt[r].Sub(start), m.Ins, m.Rejoins, m.In, healAt.Sub(start))
		}
		// Out, it carried no data frames: the survivor was in.
		if p.sentOn1[r] != p.sentOut[r] {
			t.Errorf("rank %d: member 1 carried %d data frames while out", r, p.sentOn1[r]-p.sentOut[r])
		}
		if m.FramesSent <= p.sentOn1[r]+100 || m.FramesRecv == 0 {
			t.Errorf("rank %d: member 1 sent %d frames, %d of them when re-admitted: it does not carry frames again", r, m.FramesSent, p.sentOn1[r])
		}
	}
	// Drain, then check delivery: nothing twice; nothing lost except what
	// went on member 1 between the failure and its detection.
	p.drain()
	detected := p.outAt[0]
	if p.outAt[1].After(detected) {
		detected = p.outAt[1]
	}
	lost := 0
	for id, at := range p.sentAt {
		switch n := p.got[id]; {
		case n > 1:
			t.Errorf("frame %d delivered %d times", id, n)
		case n == 0 && (at.Before(failAt) || !at.Before(detected)):
			t.Errorf("frame %d sent at %v lost, outside the failure's detection window [%v, %v)",
				id, at.Sub(start), failAt.Sub(start), detected.Sub(start))
		case n == 0:
			lost++
		}
	}
	t.Logf("%d frames sent, %d lost while member 1 was failing undetected", len(p.sentAt), lost)
	if lost == 0 {
		t.Errorf("no frame lost: the failure was not injected")
	}
}

// A member's network that loses frames in one direction only (0 to 1) is
// taken out at both ends: at rank 1 for silence, at rank 0, which still
// hears rank 1 on it, because rank 1's probes report it deaf. Nothing rank
// 0 sends after that is lost; once the link heals both take it back.
func TestOneWayFailure(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s := f.stripes(t, testOpts)
	p := newPingPong(t, f, s)
	start := f.now()
	failAt, healAt := start.Add(40*time.Millisecond), start.Add(120*time.Millisecond)
	failed, healed := false, false
	p.run(start.Add(200*time.Millisecond), func(now time.Time) {
		if !failed && !now.Before(failAt) {
			f.nets[1].Cut(0, 1)
			failed = true
		}
		if !healed && !now.Before(healAt) {
			f.nets[1].HealAll()
			healed = true
		}
	})
	p.drain()
	m0, m1 := s[0].Member(1), s[1].Member(1)
	t.Logf("out at %v and %v, in at %v and %v; %v; %v", p.outAt[0].Sub(start), p.outAt[1].Sub(start),
		p.inAt[0].Sub(start), p.inAt[1].Sub(start), m0, m1)
	if m1.Outs != 1 || p.outAt[1].Sub(failAt) > testOpts.Silence+2*p.tick {
		t.Errorf("rank 1: %v out at %v, want once, within %v of the failure", m1, p.outAt[1].Sub(start), testOpts.Silence)
	}
	if m0.Outs != 1 || p.outAt[0].Sub(failAt) > testOpts.Silence+testOpts.Probe+2*p.tick {
		t.Errorf("rank 0: %v out at %v, want once, within %v of the failure", m0, p.outAt[0].Sub(start), testOpts.Silence+testOpts.Probe)
	}
	if !m0.In || !m1.In || p.inAt[0].IsZero() || p.inAt[1].IsZero() {
		t.Errorf("member 1 not back in at both ends after the heal")
	}
	detected := p.outAt[0]
	for id, at := range p.sentAt {
		if n := p.got[id]; n > 1 || n == 0 && (at.Before(failAt) || !at.Before(detected)) {
			t.Errorf("frame %d sent at %v delivered %d times (failure at %v, detected at %v)", id, at.Sub(start), n, failAt.Sub(start), detected.Sub(start))
		}
	}
}

// A member whose device fails (its rank's device on that network is
// killed) is taken out at its first send error by its own rank, and by
// silence at the peer; no frame the failing rank sends afterwards is lost.
func TestSendErrorTakesOut(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s := f.stripes(t, testOpts)
	p := newPingPong(t, f, s)
	start := f.now()
	killAt := start.Add(30 * time.Millisecond)
	killed := false
	p.run(start.Add(100*time.Millisecond), func(now time.Time) {
		if !killed && !now.Before(killAt) {
			f.nets[1].Kill(1)
			killed = true
		}
	})
	m1 := s[1].Member(1)
	if m1.In || m1.Reason != ReasonSendError && m1.Reason != ReasonPollError || !errors.Is(m1.Err, hal.ErrClosed) {
		t.Errorf("rank 1's dead member: %v (err %v), want out for its device error, hal.ErrClosed", m1, m1.Err)
	}
	if p.outAt[1].Sub(killAt) > 2*p.tick {
		t.Errorf("rank 1 took its dead member out at %v, %v after the kill", p.outAt[1].Sub(start), p.outAt[1].Sub(killAt))
	}
	// Rank 0 hears nothing on member 1 any more, and rank 1 says (on
	// member 0) it hears nothing from rank 0 there: whichever comes first.
	if m0 := s[0].Member(1); m0.In || m0.Reason != ReasonSilence && m0.Reason != ReasonPeerDeaf {
		t.Errorf("rank 0's member 1 toward the dead device: %v, want out for silence or the peer's report", m0)
	}
	p.drain()
	for id, at := range p.sentAt {
		// Rank 1 sends the even ids (rank 0 sent first in each tick).
		if id%2 == 0 && !at.Before(killAt) && p.got[id] != 1 {
			t.Errorf("frame %d sent by rank 1 at %v after its member died: delivered %d times, want 1", id, at.Sub(start), p.got[id])
		}
	}
	if s[1].Member(0).FramesSent == 0 {
		t.Errorf("rank 1 sent nothing on its surviving member")
	}
}

// Over lossless members, every frame is delivered exactly once, spread over
// all the members, with full queues (ErrNoResource) on the way.
func TestExactlyOnce(t *testing.T) {
	const ranks, members, perPair = 3, 3, 2000
	f := newFabric(t, ranks, make([]faults.Spec, members), simnet.WithLimits(16, 64))
	s := f.stripes(t, Options{Probe: -1})
	got := map[uint64]int{}
	var id uint64
	full := 0
	poll := func() {
		for _, d := range s {
			for _, x := range pollIDs(t, d) {
				got[x]++
			}
		}
	}
	// Bursts of 40 frames to each peer, more than the 3 x 16 a rank may
	// have in flight, before the clock moves.
	const burst = 40
	for range perPair / burst {
		for src := range hal.Rank(ranks) {
			for dst := range hal.Rank(ranks) {
				if src == dst {
					continue
				}
				for range burst {
					id++
					hdr, payload := msg(src, dst, id, 16+int(id%300))
					for !sendOK(t, s[src], hdr, payload) {
						full++
						f.step()
						poll()
					}
				}
			}
		}
		f.step()
		poll()
	}
	for f.step() {
		poll()
	}
	poll()
	for x := uint64(1); x <= id; x++ {
		if got[x] != 1 {
			t.Errorf("frame %d delivered %d times", x, got[x])
		}
	}
	if len(got) != int(id) {
		t.Errorf("%d distinct frames delivered, %d sent", len(got), id)
	}
	for r, d := range s {
		for _, m := range d.Members() {
			if m.FramesSent < perPair/members || !m.In {
				t.Errorf("rank %d: %v: want in, and a share of the %d frames", r, m, 2*perPair)
			}
		}
		if c := d.Counters(); c.FramesSent.Load() != 2*perPair || c.FramesRecv.Load() != 2*perPair || c.Dropped() != 0 {
			t.Errorf("rank %d: counters %v, want %d frames each way, no drops", r, c, 2*perPair)
		}
	}
	t.Logf("%d frames, %d sends found every queue full; rank 0: %v", id, full, s[0].Members())
	if full == 0 {
		t.Errorf("no send found every queue full: the limits did not bite")
	}
}

// With one member losing 30% of its frames, a crude retransmitting layer
// above (ack every frame, resend what is unacknowledged after a timeout)
// gets everything through; the lossy member is not taken out, since it
// still delivers.
func TestLossyMemberRetransmit(t *testing.T) {
	const frames = 3000
	f := newFabric(t, 2, []faults.Spec{{Seed: 3}, {Loss: 0.3, Seed: 4}})
	s := f.stripes(t, testOpts)
	const rto = 2 * time.Millisecond
	unacked := map[uint64]time.Time{} // id -> last sent
	received := map[uint64]bool{}
	next := uint64(1)
	start := f.now()
	for (next <= frames || len(unacked) > 0) && f.now().Sub(start) < 10*time.Second {
		now := f.now()
		// Rank 0 sends new frames, at most 32 unacknowledged, and resends
		// the overdue ones.
		for id, at := range unacked {
			if now.Sub(at) >= rto {
				hdr, payload := msg(0, 1, id, 200)
				if sendOK(t, s[0], hdr, payload) {
					unacked[id] = now
				}
			}
		}
		for next <= frames && len(unacked) < 32 {
			hdr, payload := msg(0, 1, next, 200)
			if !sendOK(t, s[0], hdr, payload) {
				break
			}
			unacked[next] = now
			next++
		}
		f.advance(50 * time.Microsecond)
		// Rank 1 acknowledges every copy; rank 0 forgets what is acked.
		for _, id := range pollIDs(t, s[1]) {
			received[id] = true
			hdr, payload := msg(1, 0, id, 8)
			sendOK(t, s[1], hdr, payload)
		}
		for _, id := range pollIDs(t, s[0]) {
			delete(unacked, id)
		}
	}
	if len(received) != frames || len(unacked) != 0 {
		t.Fatalf("received %d of %d frames, %d unacknowledged after %v", len(received), frames, len(unacked), f.now().Sub(start))
	}
	lost := f.nets[1].Stats().Dropped.Load()
	t.Logf("all %d frames through in %v; the lossy network lost %d copies; %v", frames, f.now().Sub(start), lost, s[0].Members())
	if lost == 0 {
		t.Errorf("the lossy member lost nothing")
	}
	for r, d := range s {
		if m := d.Member(1); !m.In || m.Outs != 0 || m.FramesSent == 0 {
			t.Errorf("rank %d: lossy member %v: want in throughout, carrying frames", r, m)
		}
	}
}

// Under a flood, a member whose queue fills up sooner backs off and
// carries fewer frames than a roomier one, and no frame is lost.
func TestBackoffWeighting(t *testing.T) {
	small, err := simnet.New(2, faults.Spec{}, simnet.WithLimits(4, 4096))
	if err != nil {
		t.Fatal(err)
	}
	large, err := simnet.New(2, faults.Spec{}, simnet.WithLimits(64, 4096))
	if err != nil {
		t.Fatal(err)
	}
	f := &fabric{nets: []*simnet.Network{small, large}}
	s := f.stripes(t, Options{Probe: -1})
	const frames = 5000
	got := 0
	for id := uint64(1); id <= frames; id++ {
		hdr, payload := msg(0, 1, id, 100)
		for !sendOK(t, s[0], hdr, payload) {
			f.step()
			got += len(pollIDs(t, s[1]))
		}
	}
	for f.step() {
	}
	got += len(pollIDs(t, s[1]))
	a, b := s[0].Member(0), s[0].Member(1)
	t.Logf("%v\n%v", a, b)
	if got != frames {
		t.Errorf("delivered %d of %d frames", got, frames)
	}
	if a.NoResource == 0 || a.FramesSent*2 > b.FramesSent {
		t.Errorf("the member with 4 frames in flight carried %d frames, the one with 64 %d: want under half as many", a.FramesSent, b.FramesSent)
	}
}

// TestMemberErrOfLaterOut: MemberStats' "Reason is why it was last taken
// out toward one, Err the device error that did it (nil for the others)".
// A member taken out once for a transient device error, back in, then
// taken out for silence reports Reason silence (or peer-deaf) and no
// device error.
func TestMemberErrOfLaterOut(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s, flaky := f.stripesFailingOnce(t)
	x := newMesh(t, f, s)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	flaky.armed = true
	x.run(f.now().Add(60*time.Millisecond), func(time.Time) {})
	if m := s[0].Member(1); !m.In || m.Outs != 1 || m.Reason != ReasonSendError {
		t.Fatalf("after a transient error: %v, want out once for send-error and back in", m)
	}
	f.nets[1].Isolate(1)
	x.run(f.now().Add(60*time.Millisecond), func(time.Time) {})
	m := s[0].Member(1)
	if m.In || m.Reason == ReasonSendError || m.Reason == ReasonPollError {
		t.Fatalf("after the isolation: %v, want out for silence or the peer's report", m)
	}
	if m.Err != nil {
		t.Errorf("member out for %v reports device error %q, from an earlier outage: want nil", m.Reason, m.Err)
	}
}
