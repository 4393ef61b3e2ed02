package stripe

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
	"github.com/weft-hpc/weft/transport/inproc"
)

// mesh drives n ranks that each send one frame to every other rank every
// tick, and records what arrives.
type mesh struct {
	t      *testing.T
	f      *fabric
	s      []*Device
	tick   time.Duration
	nextID uint64
	sentAt map[uint64]time.Time
	got    map[uint64]int // id -> times delivered
	// afterTick, if set, is called after each tick's frames are polled.
	afterTick func()
}

func newMesh(t *testing.T, f *fabric, s []*Device) *mesh {
	return &mesh{t: t, f: f, s: s, tick: 100 * time.Microsecond, sentAt: map[uint64]time.Time{}, got: map[uint64]int{}}
}

// run ticks until end, calling at(now) before each tick.
func (x *mesh) run(end time.Time, at func(now time.Time)) {
	for now := x.f.now(); now.Before(end); now = x.f.now() {
		at(now)
		for src := range x.s {
			for dst := range x.s {
				if src == dst {
					continue
				}
				x.nextID++
				hdr, payload := msg(hal.Rank(src), hal.Rank(dst), x.nextID, 64)
				if sendOK(x.t, x.s[src], hdr, payload) {
					x.sentAt[x.nextID] = now
				}
			}
		}
		x.f.advance(x.tick)
		x.poll()
		if x.afterTick != nil {
			x.afterTick()
		}
	}
}

func (x *mesh) poll() {
	for _, s := range x.s {
		for _, id := range pollIDs(x.t, s) {
			x.got[id]++
		}
	}
}

// drain delivers what is still in flight.
func (x *mesh) drain() {
	for x.f.step() {
		x.poll()
	}
	x.poll()
}

// dups fails the test for every frame delivered more than once.
func (x *mesh) dups() {
	x.t.Helper()
	for id, n := range x.got {
		if n > 1 {
			x.t.Errorf("frame %d delivered %d times", id, n)
		}
	}
}

// A member whose network fails between two ranks only is taken out toward
// that peer only: toward the third rank it stays in and keeps carrying
// frames. When the link heals it rejoins that peer and is back in.
func TestPerPeerHealth(t *testing.T) {
	f := newFabric(t, 3, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s := f.stripes(t, testOpts)
	x := newMesh(t, f, s)
	start := f.now()
	cutAt, healAt := start.Add(30*time.Millisecond), start.Add(100*time.Millisecond)
	var sentTo2AtCut, sentTo2BeforeHeal uint64
	var during [3][3]LinkState // Link(1, peer) at each rank just before the heal
	cut, healed := false, false
	x.run(start.Add(160*time.Millisecond), func(now time.Time) {
		if !cut && !now.Before(cutAt) {
			f.nets[1].Cut(0, 1)
			f.nets[1].Cut(1, 0)
			sentTo2AtCut = s[0].Member(1).FramesSent
			cut = true
		}
		if !healed && !now.Before(healAt) {
			for r := range s {
				for p := range s {
					during[r][p] = s[r].Link(1, hal.Rank(p))
				}
			}
			sentTo2BeforeHeal = s[0].Member(1).FramesSent
			f.nets[1].HealAll()
			healed = true
		}
	})
	x.drain()
	x.dups()
	for r, p := range [][2]int{{0, 1}, {1, 0}} {
		if during[p[0]][p[1]] != LinkOut {
			t.Errorf("case %d: rank %d's member 1 toward rank %d before the heal: %v, want out", r, p[0], p[1], during[p[0]][p[1]])
		}
	}
	for _, p := range [][2]int{{0, 2}, {2, 0}, {1, 2}, {2, 1}} {
		if during[p[0]][p[1]] != LinkIn {
			t.Errorf("rank %d's member 1 toward rank %d, whose link never failed: %v, want in", p[0], p[1], during[p[0]][p[1]])
		}
	}
	// Rank 0 sent half its frames to rank 2, round-robin over two members:
	// member 1 carried about a quarter of all while cut from rank 1.
	if got := sentTo2BeforeHeal - sentTo2AtCut; got < 100 {
		t.Errorf("rank 0's member 1 carried %d frames while cut from rank 1 only: want it to keep carrying rank 2's share", got)
	}
	for r := range s {
		m := s[r].Member(1)
		t.Logf("rank %d: %v", r, m)
		wantOuts := uint64(1)
		if r == 2 {
			wantOuts = 0
		}
		if m.Outs != wantOuts || !m.In || m.Ins != wantOuts {
			t.Errorf("rank %d member 1: %v; want %d outs and as many ins, and in toward all at the end", r, m, wantOuts)
		}
	}
	// Every frame sent to or by rank 2 arrived; between 0 and 1 only those
	// sent on member 1 before the cut was detected may be lost.
	lost := 0
	for id, at := range x.sentAt {
		if x.got[id] == 0 {
			lost++
			if at.Before(cutAt) || at.After(cutAt.Add(testOpts.Silence+testOpts.Probe)) {
				t.Errorf("frame %d sent at %v lost, outside the cut's detection", id, at.Sub(start))
			}
		}
	}
	t.Logf("%d frames sent, %d lost to the cut before it was detected", len(x.sentAt), lost)
}

// renamed is a member device at an address of its own (simnet's is the
// rank's): ADDR/INCARNATION, so that a restarted member has a new address.
// Connect takes such addresses and records the last one per peer.
type renamed struct {
	hal.Device
	addr      string
	connected map[hal.Rank]string
}

func (r *renamed) Addr() string { return r.addr }

func (r *renamed) Connect(peer hal.Rank, a string) error {
	base, _, _ := strings.Cut(a, "/")
	if err := r.Device.Connect(peer, base); err != nil {
		return err
	}
	r.connected[peer] = a
	return nil
}

func rename(d hal.Device, inc int) *renamed {
	return &renamed{Device: d, addr: d.Addr() + "/" + string(rune('0'+inc)), connected: map[hal.Rank]string{}}
}

// renamedStripes is fabric.stripes over renamed members.
func (f *fabric) renamedStripes(t *testing.T, opts Options) ([]*Device, [][]*renamed) {
	t.Helper()
	size := f.nets[0].Size()
	out := make([]*Device, size)
	devs := make([][]*renamed, size)
	for r := range out {
		var members []hal.Device
		for _, n := range f.nets {
			d := rename(n.Device(hal.Rank(r)), 1)
			devs[r] = append(devs[r], d)
			members = append(members, d)
		}
		o := opts
		o.Rank, o.JobKey, o.Now = hal.Rank(r), simnet.DefaultJobKey, f.now
		s, err := New(members, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[r] = s
	}
	connect(t, out)
	return out, devs
}

// A member whose device is restarted, at a new address, is put in place
// with Replace: it rejoins the peer (BOOTING carries its address, and the
// peer connects its member to it), is back in at both ends after the
// reintegration, and carries frames again. With a fast restart, frames
// the peer sent to the old incarnation reach the new one before the peer
// learns of it: they are refused and counted, never delivered, as is a
// frame of the old incarnation that reaches the peer after the new one's
// BOOTING; with a slow one (down for longer than Silence) the peer takes
// the member out first.
// Nothing is delivered twice, and every frame sent once both ends are back
// in arrives.
func TestReplaceMember(t *testing.T) {
	for _, down := range []time.Duration{0, 40 * time.Millisecond} {
		t.Run("down="+down.String(), func(t *testing.T) {
			f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}}, simnet.WithLatency(500*time.Microsecond))
			s, devs := f.renamedStripes(t, testOpts)
			x := newMesh(t, f, s)
			start := f.now()
			killAt := start.Add(30 * time.Millisecond)
			replaceAt := killAt.Add(down)
			killed, replaced := false, false
			var backIn time.Time
			var sentAtIn uint64
			var fresh *renamed
			// A frame of rank 1's old incarnation of member 1, delayed on
			// the wire: injected when rank 0 has taken the restart's
			// BOOTING, it arrives while the link is stale.
			const staleID = 1 << 40
			injected := false
			x.run(start.Add(150*time.Millisecond), func(now time.Time) {
				if !killed && !now.Before(killAt) {
					if err := f.nets[1].Kill(1); err != nil {
						t.Fatal(err)
					}
					killed = true
				}
				if !replaced && !now.Before(replaceAt) {
					dev, err := f.nets[1].Restart(1)
					if err != nil {
						t.Fatal(err)
					}
					fresh = rename(dev, 2)
					if err := s[1].Replace(1, fresh); err != nil {
						t.Fatal(err)
					}
					if got := s[1].Link(1, 0); got != LinkJoining {
						t.Errorf("right after Replace, the new member toward rank 0 is %v, want joining", got)
					}
					replaced = true
				}
				if replaced && !injected && s[0].Link(1, 1) == LinkJoining {
					hdr, payload := msg(1, 0, staleID, 64)
					if err := f.nets[1].Inject(1, 0, append(hdr, payload...)); err != nil {
						t.Fatal(err)
					}
					injected = true
				}
				if replaced && backIn.IsZero() && s[0].Link(1, 1) == LinkIn && s[1].Link(1, 0) == LinkIn {
					backIn = now
					sentAtIn = s[1].Member(1).FramesSent
				}
			})
			x.drain()
			x.dups()
			m0, m1 := s[0].Member(1), s[1].Member(1)
			t.Logf("replaced at %v, back in at both ends %v later\nrank 0: %v\nrank 1: %v",
				replaceAt.Sub(start), backIn.Sub(replaceAt), m0, m1)
			if backIn.IsZero() || backIn.Sub(replaceAt) > 5*time.Millisecond {
				t.Fatalf("the new member not back in at both ends within 5 ms of its Replace (at %v)", backIn.Sub(replaceAt))
			}
			if got := devs[0][1].connected[1]; got != "simnet:1/2" {
				t.Errorf("rank 0's member 1 connected to %q for rank 1, want the new incarnation's simnet:1/2", got)
			}
			if !strings.Contains(s[1].Addr(), "simnet:1/2") || m1.Addr != "simnet:1/2" || m1.Incarnation != 1 {
				t.Errorf("rank 1's stripe address %q, member %v: want the new member's address and incarnation 1", s[1].Addr(), m1)
			}
			if m1.FramesSent <= sentAtIn+100 || !m1.In || !m0.In || m0.Ins < 1 || m1.Ins < 1 {
				t.Errorf("after the rejoin the new member carried %d frames: want it in at both ends and carrying frames", m1.FramesSent-sentAtIn)
			}
			if down == 0 && m1.Refused == 0 {
				t.Errorf("fast restart: the new incarnation refused no frame, want those rank 0 sent to the old one refused")
			}
			if !injected || x.got[staleID] != 0 || m0.Refused == 0 {
				t.Errorf("a frame of the old incarnation arriving at rank 0 after the restart's BOOTING: injected %v, delivered %d times, rank 0 refused %d; want refused",
					injected, x.got[staleID], m0.Refused)
			}
			// A refused frame is a drop of the stripe's (from a peer's
			// incarnation that is gone), so that received frames are
			// delivered ones plus counted drops.
			if d := s[0].Counters().Drops[hal.DropPeer].Load(); d < m0.Refused {
				t.Errorf("rank 0 refused %d frames and counts %d DropPeer drops, want at least as many", m0.Refused, d)
			}
			if down > 0 && (m0.Outs != 1 || m0.Reason != ReasonSilence && m0.Reason != ReasonPeerDeaf) {
				t.Errorf("slow restart: rank 0's member 1 %v, want taken out once (silence or the peer's report)", m0)
			}
			for id, at := range x.sentAt {
				if !backIn.IsZero() && at.After(backIn) && x.got[id] != 1 {
					t.Errorf("frame %d sent at %v, after both ends were back in, delivered %d times", id, at.Sub(start), x.got[id])
				}
			}
			if fresh.Device.Counters().FramesRecv.Load() == 0 {
				t.Errorf("the new incarnation received nothing")
			}
		})
	}
}

// Replace refuses what cannot be a member, and a closed stripe.
func TestReplaceErrors(t *testing.T) {
	f := newFabric(t, 2, make([]faults.Spec, 2))
	s := f.stripes(t, Options{})
	small, err := simnet.New(2, faults.Spec{}, simnet.WithMTU(100))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		i    int
		dev  hal.Device
		want string
	}{
		"range": {2, small.Device(0), "member 2 of 2"},
		"nil":   {1, nil, "nil"},
		"twin":  {1, f.nets[0].Device(0), "member 0's device"},
		"mtu":   {1, small.Device(0), "MTU of at least"},
	} {
		if err := s[0].Replace(c.i, c.dev); !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Replace: %v, want ErrBadMember naming %q", name, err, c.want)
		}
	}
	s[0].Close()
	if err := s[0].Replace(1, small.Device(1)); !errors.Is(err, hal.ErrClosed) {
		t.Errorf("Replace on a closed stripe: %v, want hal.ErrClosed", err)
	}

	// A stripe of reliable members says Reliable, and lapi keeps nothing
	// to send again toward its peers: Replace would lose what was in
	// flight on the old member, so it is refused. A one-member stripe is
	// Ordered as its member is: an unordered replacement is refused.
	const key = 0x57_52_49_50_45
	var members []hal.Device
	for range 2 {
		d, err := inproc.NewFabric(2, key).Open(0)
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, d)
	}
	rs, err := New(members, Options{Rank: 0, JobKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	fresh, err := inproc.NewFabric(2, key).Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := rs.Replace(1, fresh); !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), "reliable") {
		t.Errorf("Replace in a reliable stripe: %v, want ErrBadMember naming it reliable", err)
	}
	f1 := newFabric(t, 2, make([]faults.Spec, 2))
	one, err := New([]hal.Device{ordered{f1.nets[0].Device(0)}}, Options{Rank: 0, JobKey: simnet.DefaultJobKey, Now: f1.now})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if c := one.Caps(); !c.Ordered || c.Reliable {
		t.Fatalf("one ordered member: %+v, want Ordered, not Reliable", c)
	}
	if err := one.Replace(0, f1.nets[1].Device(0)); !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), "Ordered: true") {
		t.Errorf("Replace of an ordered stripe's member by an unordered device: %v, want ErrBadMember", err)
	}
}

// ordered says its device delivers in order (a test's claim).
type ordered struct{ hal.Device }

func (o ordered) Caps() hal.Caps {
	c := o.Device.Caps()
	c.Ordered = true
	return c
}

// Under loss and reordering on the member's network, the rejoin after a
// heal still converges (BOOTING and RDMA_READY are resent), at both ends,
// for every seed; a lossy member is not taken out for its losses alone,
// and nothing is refused (no incarnation changed).
func TestRejoinUnderLoss(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run("seed="+string(rune('0'+seed)), func(t *testing.T) {
			f := newFabric(t, 2, []faults.Spec{{Seed: seed}, {Loss: 0.2, Reorder: 0.1, Delay: 300 * time.Microsecond, Seed: seed + 100}})
			s := f.stripes(t, testOpts)
			x := newMesh(t, f, s)
			start := f.now()
			failAt, healAt := start.Add(20*time.Millisecond), start.Add(80*time.Millisecond)
			failed, healed := false, false
			var backIn time.Time
			x.run(start.Add(300*time.Millisecond), func(now time.Time) {
				if !failed && !now.Before(failAt) {
					f.nets[1].Isolate(0)
					failed = true
				}
				if !healed && !now.Before(healAt) {
					f.nets[1].HealAll()
					healed = true
				}
				if healed && backIn.IsZero() && s[0].Link(1, 1) == LinkIn && s[1].Link(1, 0) == LinkIn {
					backIn = now
				}
			})
			x.drain()
			x.dups()
			m0, m1 := s[0].Member(1), s[1].Member(1)
			if backIn.IsZero() || !m0.In || !m1.In {
				t.Fatalf("member 1 not back in at both ends after the heal: %v; %v", m0, m1)
			}
			if m0.Refused+m1.Refused != 0 {
				t.Errorf("a link coming back refused %d frames: both ends are the incarnations they were, nothing is stale", m0.Refused+m1.Refused)
			}
			if m0.Outs != 1 || m1.Outs != 1 {
				t.Errorf("member 1 taken out %d and %d times, want once at each end (for the isolation, not the losses)", m0.Outs, m1.Outs)
			}
			t.Logf("back in %v after the heal; %v; %v", backIn.Sub(healAt), m0, m1)
		})
	}
}

// A rank that stalls (polls nothing for twice Silence) while its peer
// sends on both members finds both members' frames queued when it polls
// again: it drains them all before judging, so the member it happens to
// poll last is not taken out for silence.
func TestNoSilenceAfterStall(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}}, simnet.WithLimits(4096, 4096))
	s := f.stripes(t, testOpts)
	x := newMesh(t, f, s)
	start := f.now()
	x.run(start.Add(20*time.Millisecond), func(time.Time) {})
	// Rank 0 keeps sending; rank 1 neither sends nor polls.
	for now := f.now(); now.Before(start.Add(20*time.Millisecond + 2*testOpts.Silence)); now = f.now() {
		for range 2 {
			x.nextID++
			hdr, payload := msg(0, 1, x.nextID, 64)
			if !sendOK(t, s[0], hdr, payload) {
				t.Fatal("rank 0's queues filled")
			}
		}
		f.advance(x.tick)
		for _, id := range pollIDs(t, s[0]) {
			x.got[id]++
		}
	}
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	x.drain()
	x.dups()
	for r := range s {
		if m := s[r].Member(1); m.Outs != 0 {
			t.Errorf("rank %d: %v: taken out across a stall", r, m)
		}
	}
}

// closeOnAddr is a fresh member device whose Addr runs hook first: it lets
// the test put a Close of the stripe, which any goroutine may call at any
// time, inside Replace, after Replace checked that the stripe is open.
type closeOnAddr struct {
	*renamed
	hook   func()
	closed int
}

func (c *closeOnAddr) Addr() string {
	if c.hook != nil {
		h := c.hook
		c.hook = nil
		h()
	}
	return c.renamed.Addr()
}

func (c *closeOnAddr) Close() error {
	c.closed++
	return c.renamed.Close()
}

// Close racing Replace: whichever wins, the new member must end closed (a
// stripe closed before or during Replace owns nothing open), and Replace
// must not install it in a closed stripe and report success.
func TestReplaceRacingClose(t *testing.T) {
	f := newFabric(t, 2, make([]faults.Spec, 2))
	s, _ := f.renamedStripes(t, Options{Probe: -1})
	if err := f.nets[0].Kill(1); err != nil {
		t.Fatal(err)
	}
	dev, err := f.nets[0].Restart(1)
	if err != nil {
		t.Fatal(err)
	}
	fresh := &closeOnAddr{renamed: rename(dev, 2)}
	fresh.hook = func() {
		if err := s[1].Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	rerr := s[1].Replace(0, fresh)
	t.Logf("Replace after a concurrent Close returned %v; the new member was closed %d times", rerr, fresh.closed)
	if !errors.Is(rerr, hal.ErrClosed) {
		t.Errorf("Replace during Close returned %v, want hal.ErrClosed", rerr)
	}
	if fresh.closed == 0 {
		t.Errorf("the stripe was closed during Replace, and the new member it took is left open (leaked); Replace returned %v", rerr)
	}
}

// TestReplaceKeepsDrops: the stripe's drop counters are the members' drops
// summed, counts of frames dropped so far, which Replace does not make go
// back: the old member's drops happened (hal.Counters: every frame
// received is delivered or counted under one drop reason).
func TestReplaceKeepsDrops(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2, Corrupt: 0.2}})
	s, _ := f.renamedStripes(t, testOpts)
	x := newMesh(t, f, s)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	before := s[1].Counters().Drops[hal.DropCRC].Load()
	if before == 0 {
		t.Fatal("no corrupted frame dropped: the fault was not injected")
	}
	if err := f.nets[1].Kill(1); err != nil {
		t.Fatal(err)
	}
	dev, err := f.nets[1].Restart(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s[1].Replace(1, rename(dev, 2)); err != nil {
		t.Fatal(err)
	}
	after := s[1].Counters().Drops[hal.DropCRC].Load()
	if after < before {
		t.Errorf("rank 1's CRC drops went from %d to %d across Replace: the old member's drops are forgotten", before, after)
	}
}

// restartMember replaces rank r's member i by a restart of its device,
// renamed as incarnation inc.
func restartMember(t *testing.T, f *fabric, s []*Device, r hal.Rank, i, inc int) {
	t.Helper()
	f.nets[i].Kill(r)
	dev, err := f.nets[i].Restart(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := s[r].Replace(i, rename(dev, inc)); err != nil {
		t.Fatal(err)
	}
}

// TestReplaceLostReadyRefusesNothingCurrent: after a Replace of rank 1's
// member 1, one end takes the link back in first and starts sending data
// on it; its RDMA_READY answer to the other end, still joining, is lost
// (twice; resent on the other end's timer). The frames it sends on member
// 1 from then on are sent by the current incarnation to the current
// incarnation, and only frames "sent to or by an incarnation that is gone"
// are refused (doc.go): every one is delivered.
func TestReplaceLostReadyRefusesNothingCurrent(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}}, simnet.WithLatency(500*time.Microsecond))
	s, _ := f.renamedStripes(t, testOpts)
	x := newMesh(t, f, s)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	dropped := 0
	firstIn := hal.Rank(9)
	f.nets[1].SetFilter(func(src, dst hal.Rank, frame []byte) bool {
		var h hal.Header
		if err := hal.DecodeHeader(frame, &h); err != nil {
			return true
		}
		// An RDMA_READY of a member on an end that is in, toward the end
		// still joining.
		if h.Type == hal.FrameRDMAReady && h.Flags&flagStripe != 0 && (dropped == 0 || src == firstIn) && dropped < 2 &&
			s[src].Link(1, dst) == LinkIn && s[dst].Link(1, src) == LinkJoining {
			firstIn = src
			dropped++
			return false
		}
		return true
	})
	restartMember(t, f, s, 1, 1, 2)
	var in0 time.Time
	var sent0 uint64
	x.run(f.now().Add(100*time.Millisecond), func(now time.Time) {
		if in0.IsZero() && dropped > 0 {
			in0 = now
			sent0 = s[firstIn].Member(1).FramesSent
		}
	})
	x.drain()
	x.dups()
	m0, m1 := s[firstIn].Member(1), s[1-firstIn].Member(1)
	t.Logf("dropped %d RDMA_READY from rank %d; in at %v having sent %d on member 1\nfirst in: %v\nother: %v", dropped, firstIn, in0, sent0, m0, m1)
	if dropped == 0 || in0.IsZero() {
		t.Fatal("scenario not reached")
	}
	lost := 0
	for id, at := range x.sentAt {
		// Rank 0 sends the odd ids, rank 1 the even ones.
		if id%2 == uint64(1-firstIn) && at.After(in0) && x.got[id] != 1 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("rank %d refused %d frames in all; %d frames rank %d sent after its link was in (current incarnation to current incarnation) never delivered",
			1-firstIn, m1.Refused, lost, firstIn)
	}
}
