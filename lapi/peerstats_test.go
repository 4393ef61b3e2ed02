package lapi

import (
	"context"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// TestPeerStats: the counters toward each peer add up to the rank's, and
// name the right peer: rank 0 sends rank 1 five messages and rank 2 one,
// under loss so that the repairs are counted too.
func TestPeerStats(t *testing.T) {
	for _, spec := range []faults.Spec{{}, {Loss: 0.2, Seed: 5}} {
		ctxs := openInprocJob(t, 3, spec)
		bufs := make([]*sink, 3)
		var h HandlerID
		for r, c := range ctxs {
			bufs[r] = &sink{buf: make([]byte, 4096)}
			h = c.RegisterHandler(bufs[r])
		}
		stop := make([]func(), 3)
		for r := 1; r < 3; r++ {
			stop[r] = serving(ctxs[r])
		}
		k := ctxs[0].NewCounter()
		data := make([]byte, 3000)
		for i := range 6 {
			to := hal.Rank(1)
			if i == 5 {
				to = 2
			}
			if err := ctxs[0].Amsend(to, h, nil, data, SendOpts{Completion: k}); err != nil {
				t.Fatal(err)
			}
		}
		if err := k.Wait(context.Background(), 6); err != nil {
			t.Fatal(err)
		}
		for r := 1; r < 3; r++ {
			stop[r]()
		}
		ps, total := ctxs[0].PeerStats(), ctxs[0].Stats()
		if ps[1].MessagesSent != 5 || ps[2].MessagesSent != 1 || ps[0].MessagesSent != 0 {
			t.Errorf("loss %v: messages sent per peer %d %d %d, want 0 5 1", spec.Loss, ps[0].MessagesSent, ps[1].MessagesSent, ps[2].MessagesSent)
		}
		if ps[1].BytesSent < 5*3000 || ps[2].BytesSent < 3000 || ps[2].BytesSent >= ps[1].BytesSent {
			t.Errorf("loss %v: bytes sent per peer %d %d", spec.Loss, ps[1].BytesSent, ps[2].BytesSent)
		}
		var pkts, rex uint64
		for _, p := range ps {
			pkts += p.PacketsSent
			rex += p.Retransmits
		}
		if pkts != total.PacketsSent || rex != total.Retransmits {
			t.Errorf("loss %v: per-peer packets %d and retransmits %d, the rank's %d and %d", spec.Loss, pkts, rex, total.PacketsSent, total.Retransmits)
		}
		if spec.Loss > 0 && rex == 0 {
			t.Errorf("loss %v: no retransmission counted", spec.Loss)
		}
		if in := ctxs[1].PeerStats()[0].MessagesIn; in != 5 {
			t.Errorf("loss %v: rank 1 counts %d messages from rank 0, want 5", spec.Loss, in)
		}
	}
}
