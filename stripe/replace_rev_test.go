package stripe

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

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

// After a Replace of rank 1's member 1, one end takes the link back in
// first (it has both RDMA_READYs) and starts sending data on it; its
// RDMA_READY answer to the other end is lost (twice; resent on the other
// end's timer). The frames it sends on member 1 from then on are sent by
// the current incarnation to the current incarnation: doc.go says only
// frames "sent to or by an incarnation that is gone" are refused, so these
// must be delivered, not refused.
func TestRevCurrentFramesRefusedAfterLostReady(t *testing.T) {
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
