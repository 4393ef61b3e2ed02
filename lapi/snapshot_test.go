package lapi

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// snapSink takes active messages into a buffer of its own and counts them.
type snapSink struct{ n int }

func (s *snapSink) OnHeader(src hal.Rank, uhdr []byte, n int) ([]byte, any) {
	return make([]byte, n), nil
}
func (s *snapSink) OnComplete(src hal.Rank, cookie any) { s.n++ }

// TestSnapshotLinkAndRDMA: with the link from rank 0 to rank 1 cut, rank
// 0's snapshot shows its message unacknowledged and resent, with the
// timeout backed off, and its Put in flight holding an rCxt; once the link
// heals and all complete, nothing is left in flight and the resends are
// counted.
func TestSnapshotLinkAndRDMA(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{})
	defer j.close()
	org, tgt := j.ctxs[0], j.ctxs[1]
	var got snapSink
	h := org.RegisterHandler(&got)
	if h2 := tgt.RegisterHandler(&got); h2 != h {
		t.Fatalf("handler ids %d and %d differ", h, h2)
	}
	mem := make([]byte, 50_000)
	pvo, err := tgt.TPT().Register(mem, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}

	j.net.Cut(0, 1)
	if err := org.Amsend(1, h, []byte("hdr"), []byte("data"), SendOpts{}); err != nil {
		t.Fatal(err)
	}
	done := org.NewCounter()
	if err := org.Put(1, pvo, make([]byte, len(mem)), SendOpts{Completion: done}); err != nil {
		t.Fatal(err)
	}
	for range 4 { // a few retransmission timeouts of virtual time
		j.step()
	}
	s := org.Snapshot()
	if s.Rank != 0 || s.Size != 2 || s.Reliable || s.Closed || len(s.Peers) != 2 {
		t.Fatalf("snapshot %+v: want rank 0 of 2, unreliable, open, 2 peers", s)
	}
	p := s.Peers[1]
	t.Logf("# toward rank 1, cut: %+v", p)
	if p.Peer != 1 || p.Unacked < 1 || p.Retries < 1 || p.Backoff < 1 || p.OldestAge <= 0 || p.RTO <= 0 || p.Window <= 0 {
		t.Errorf("toward rank 1: %+v; want a packet unacknowledged, resent, with the timeout backed off", p)
	}
	if p.Failed != "" || !p.RDMAReady {
		t.Errorf("toward rank 1: %+v; want not failed, RDMA on (no reintegration)", p)
	}
	if s.Transfers != 1 || s.RCxtsInUse < 1 || p.RDMABytes != len(mem) || p.RDMAWindow <= 0 {
		t.Errorf("snapshot %+v, toward 1 %+v: want the Put in flight: 1 transfer, an rCxt, %d bytes out", s, p, len(mem))
	}
	if self := s.Peers[0]; self.Unacked != 0 || self.Queued != 0 || self.RTO != 0 {
		t.Errorf("toward self: %+v; want no link state", self)
	}
	if s.Stats.Retransmits == 0 {
		t.Errorf("stats %+v: want retransmits counted", s.Stats)
	}

	j.net.Heal(0, 1)
	// A message sent once gives the RTT a sample (Karn's rule: resent
	// ones do not).
	if err := org.Amsend(1, h, nil, []byte("again"), SendOpts{}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return got.n == 2 && done.Value() == 1 && org.Snapshot().Peers[1].Unacked == 0 })
	s = org.Snapshot()
	if p := s.Peers[1]; p.Unacked != 0 || p.Queued != 0 || p.RDMABytes != 0 || p.SRTT <= 0 {
		t.Errorf("toward rank 1, healed: %+v; want nothing in flight and an RTT sample", p)
	}
	if s.Transfers != 0 || s.RCxtsInUse != 0 || s.ChunksWaiting != 0 {
		t.Errorf("healed: %+v; want no RDMA in flight", s)
	}
}
