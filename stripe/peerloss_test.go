package stripe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestPeerLossOverStripe: a peer one member finds lost is that member's
// link gone, and the stripe carries on over the other; a peer lost on
// every member (or on the ones left, the others failed as a whole) is
// reported once through hal.PeerLoss, and the next Wait returns at once
// so that a rank blocked for it looks.
func TestPeerLossOverStripe(t *testing.T) {
	f := newFabric(t, 3, make([]faults.Spec, 2))
	var ms [2]*haltest.LossDevice
	s := make([]*Device, 3)
	for r := range s {
		var devs []hal.Device
		for i, n := range f.nets {
			dev := n.Device(hal.Rank(r))
			if r == 0 {
				ms[i] = haltest.NewLossDevice(dev)
				dev = ms[i]
			}
			devs = append(devs, dev)
		}
		d, err := New(devs, Options{Rank: hal.Rank(r), JobKey: simnet.DefaultJobKey, Now: f.now, Probe: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		s[r] = d
	}
	connect(t, s)
	dead := errors.New("connection to the peer gone")
	poll := func() {
		t.Helper()
		if _, err := s[0].Poll(func(*hal.Header, []byte) {}); err != nil && !errors.Is(err, hal.ErrClosed) {
			t.Fatal(err)
		}
	}

	ms[0].Lose(1, dead)
	poll()
	if st := s[0].Link(0, 1); st != LinkOut || s[0].Member(0).Reason != ReasonPeerLost {
		t.Fatalf("member 0 toward rank 1: %v (%v), want out for peer-lost", st, s[0].Member(0).Reason)
	}
	if n := s[0].PeersLost(); n != 0 {
		t.Fatalf("rank 1 reported lost (%d) while member 1 still reaches it", n)
	}
	for id := range uint64(4) { // every frame on member 1 now, and delivered
		hdr, payload := msg(0, 1, id, 8)
		if !sendOK(t, s[0], hdr, payload) {
			t.Fatalf("frame %d not sent", id)
		}
	}
	for f.step() {
	}
	if ids := pollIDs(t, s[1]); len(ids) != 4 {
		t.Fatalf("rank 1 got frames %v over the member left, want 4", ids)
	}

	ms[1].Lose(1, dead)
	poll()
	if n := s[0].PeersLost(); n != 1 {
		t.Fatalf("PeersLost %d after both members lost rank 1, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s[0].Wait(ctx); err != nil {
		t.Fatalf("the Wait after a report: %v, want nil at once", err)
	}
	got := s[0].LostPeers(nil)
	if len(got) != 1 || got[0].Peer != 1 || !errors.Is(got[0].Err, dead) {
		t.Fatalf("LostPeers %v, want rank 1 with the members' reason", got)
	}
	if again := s[0].LostPeers(nil); len(again) != 0 {
		t.Fatalf("a second look returned %v again", again)
	}

	// Rank 2 lost on member 0, then member 1 fails as a whole: no member
	// reaches it any more.
	ms[0].Lose(2, dead)
	poll()
	if n := s[0].PeersLost(); n != 1 {
		t.Fatalf("rank 2 reported (count %d) while member 1 reaches it", n)
	}
	f.nets[1].Kill(0)
	poll()
	if got := s[0].LostPeers(nil); s[0].PeersLost() != 2 || len(got) != 1 || got[0].Peer != 2 {
		t.Fatalf("after member 1 failed: count %d, LostPeers %v; want rank 2 reported", s[0].PeersLost(), got)
	}
}
