package stripe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/hal/haltest"
	"github.com/weft-hpc/weft/internal/faults"
)

// TestPeerLossOverStripe: a peer one member finds lost is that member's
// link gone, and the stripe carries on over the other; a link that comes
// back in is not lost any more; a peer lost on every member (or on the
// ones left, the others failed as a whole) is reported once through
// hal.PeerLoss, the next Wait returns at once (and only that one) so that
// a rank blocked for it looks, and a peer that answers again and is lost
// again is reported again.
func TestPeerLossOverStripe(t *testing.T) {
	f := newFabric(t, 3, make([]faults.Spec, 2))
	var ms [2]*haltest.LossDevice
	s := f.stripesOver(t, testOpts, func(r hal.Rank, i int, d hal.Device) hal.Device {
		if r != 0 {
			return d
		}
		ms[i] = haltest.NewLossDevice(d)
		return ms[i]
	})
	dead := errors.New("connection to the peer gone")
	poll := func(d *Device) {
		t.Helper()
		if _, err := d.Poll(func(*hal.Header, []byte) {}); err != nil && !errors.Is(err, hal.ErrClosed) {
			t.Fatal(err)
		}
	}
	// traffic between ranks 0 and 1 until member i's link from rank 0
	// is in again (probes and the rejoin ride along).
	var id uint64
	backIn := func(i int) {
		t.Helper()
		for range 2000 {
			for _, p := range [][2]hal.Rank{{0, 1}, {1, 0}} {
				hdr, payload := msg(p[0], p[1], id, 8)
				id++
				sendOK(t, s[p[0]], hdr, payload)
				if err := s[p[0]].Flush(); err != nil {
					t.Fatal(err)
				}
			}
			f.advance(100 * time.Microsecond)
			for _, d := range s {
				poll(d)
			}
			if s[0].Link(i, 1) == LinkIn {
				return
			}
		}
		t.Fatalf("member %d's link toward rank 1 not back in", i)
	}
	lost := func(want uint64) []hal.LostPeer {
		t.Helper()
		poll(s[0])
		if n := s[0].PeersLost(); n != want {
			t.Fatalf("PeersLost %d, want %d", n, want)
		}
		return s[0].LostPeers(nil)
	}

	ms[0].Lose(1, dead)
	if got := lost(0); len(got) != 0 {
		t.Fatalf("rank 1 reported lost (%v) while member 1 still reaches it", got)
	}
	if st := s[0].Link(0, 1); st != LinkOut || s[0].Member(0).Reason != ReasonPeerLost {
		t.Fatalf("member 0 toward rank 1: %v (%v), want out for peer-lost", st, s[0].Member(0).Reason)
	}
	for range 4 { // every frame on member 1 now, and delivered
		hdr, payload := msg(0, 1, id, 8)
		id++
		if !sendOK(t, s[0], hdr, payload) {
			t.Fatal("frame not sent")
		}
	}
	// Rank 1 answers on member 0 again: its link comes back, and member
	// 1's loss alone is not every member's.
	backIn(0)
	ms[1].Lose(1, dead)
	if got := lost(0); len(got) != 0 {
		t.Fatalf("rank 1 reported lost (%v) while member 0 is back in toward it", got)
	}

	ms[0].Lose(1, dead)
	got := lost(1)
	if len(got) != 1 || got[0].Peer != 1 || !errors.Is(got[0].Err, dead) {
		t.Fatalf("LostPeers %v, want rank 1 with the members' reason", got)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s[0].Wait(cancelled); err != nil {
		t.Fatalf("the Wait after a report: %v, want nil at once", err)
	}
	if err := s[0].Wait(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("the second Wait after a report: %v, want it to wait (context.Canceled here)", err)
	}
	if again := s[0].LostPeers(nil); len(again) != 0 {
		t.Fatalf("a second look returned %v again", again)
	}

	// Rank 1 answers again (a new life, say) and is lost again: reported
	// again.
	backIn(0)
	backIn(1)
	ms[0].Lose(1, dead)
	ms[1].Lose(1, dead)
	if got := lost(2); len(got) != 1 || got[0].Peer != 1 {
		t.Fatalf("rank 1 lost again after it answered: %v, want it reported again", got)
	}

	// Rank 2 lost on member 0, then member 1 fails as a whole: no member
	// reaches it any more.
	ms[0].Lose(2, dead)
	if got := lost(2); len(got) != 0 {
		t.Fatalf("rank 2 reported (%v) while member 1 reaches it", got)
	}
	f.nets[1].Kill(0)
	poll(s[0]) // member 1's Poll fails: the member is out as a whole
	if got := lost(3); len(got) != 1 || got[0].Peer != 2 {
		t.Fatalf("after member 1 failed: LostPeers %v, want rank 2", got)
	}
}
