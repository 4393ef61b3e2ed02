package lapi

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestAckPolicy sends one message at a time from rank 0 to rank 1 over a
// lossless 1,500-byte network whose acknowledgement delay is a second (8
// frames in flight at a time, so that a message arrives over several
// polls, as it does over a real link), and
// counts the acknowledgement-only packets rank 1 sends while the message
// arrives and until rank 0's origin counter fires:
//   - a message the sender waits for (above CopyThreshold, not copied)
//     is acknowledged as soon as its last packet arrives, not when its
//     retransmission timer or the delay runs out, and a message within AckEvery packets is not interrupted by
//     an acknowledgement: one in all;
//   - a longer one gets one every AckEvery packets, and one at its end;
//   - a copied message, which nobody waits for, owes its acknowledgement
//     to the delay (or to the next packet back): none while it arrives;
//   - a message longer than the window (the sender streams: more is
//     queued than the window holds) is acknowledged every ackAskEvery
//     packets while that lasts, not only every AckEvery.
func TestAckPolicy(t *testing.T) {
	const mtu = 1500
	j := openSimJob(t, 2, faults.Spec{}, func(c *Config) { c.AckDelay, c.CopyThreshold = time.Second, 16<<10 },
		simnet.WithMTU(mtu), simnet.WithLimits(8, 1024))
	defer j.close()
	k := &checker{t: t, me: 1, seen: map[[2]uint32]bool{}}
	h := j.ctxs[0].RegisterHandler(&checker{t: t, seen: map[[2]uint32]bool{}})
	j.ctxs[1].RegisterHandler(k)
	c0, c1 := j.ctxs[0], j.ctxs[1]
	room := c0.mtuOf(1) - pktHdrLen - 12
	every := c0.cfg.AckEvery
	if every != c0.cfg.Window/4 {
		t.Fatalf("AckEvery %d by default, want a quarter of the window %d", every, c0.cfg.Window)
	}
	for i, tc := range []struct {
		packets  int
		wantAcks uint64
	}{
		{packets: c0.cfg.CopyThreshold/room + 2, wantAcks: 1},
		{packets: every - 1, wantAcks: 1},
		{packets: every, wantAcks: 1},
		{packets: 2*every + 5, wantAcks: 3},
		{packets: 3, wantAcks: 0}, // copied: nobody waits
		{packets: 4 * c0.cfg.Window, wantAcks: 0},
	} {
		size := tc.packets * room
		copied := size <= c0.cfg.CopyThreshold
		org := c0.NewCounter()
		var u [12]byte
		binary.LittleEndian.PutUint32(u[4:], uint32(i))
		before, resent := c1.Stats().AcksSent, c0.Stats().Retransmits
		start := j.net.Now()
		if err := c0.Amsend(1, h, u[:], pattern[:size], SendOpts{Origin: org}); err != nil {
			t.Fatal(err)
		}
		j.run(10*time.Second, nil, func() bool { return org.Value() == 1 && k.got == i+1 })
		if k.err != nil {
			t.Fatal(k.err)
		}
		acks, took := c1.Stats().AcksSent-before, j.net.Now().Sub(start)
		t.Logf("%d packets (copied %v): %d acknowledgements, %v", tc.packets, copied, acks, took)
		if tc.packets > c0.cfg.Window {
			// Asked for every ackAskEvery packets of the part sent
			// while more than a window was queued.
			if low := uint64(tc.packets-c0.cfg.Window) / ackAskEvery / 2; acks < low {
				t.Errorf("%d packets, more than the window of %d: %d acknowledgements, want at least %d", tc.packets, c0.cfg.Window, acks, low)
			}
		} else if acks != tc.wantAcks {
			t.Errorf("%d packets of a message (copied %v): %d acknowledgements while it arrived, want %d", tc.packets, copied, acks, tc.wantAcks)
		}
		// Without an acknowledgement at once, the sender would wait for
		// its timer and resend (InitRTO) or for AckDelay.
		if n := c0.Stats().Retransmits - resent; !copied && (n > 0 || took >= c0.cfg.InitRTO) {
			t.Errorf("%d packets: the sender waited %v for its acknowledgement and resent %d packets", tc.packets, took, n)
		}
		// What is still owed (the copied message's acknowledgement) goes
		// before the next message starts.
		j.run(10*time.Second, nil, func() bool {
			c1.mu.Lock()
			defer c1.mu.Unlock()
			return c1.rel.links[0].ackDue.IsZero() && !c1.rel.links[0].ackNow
		})
	}
}

// TestWaitsNowCopies: toward a peer over the lossy network, a 32 KiB
// Amsend whose caller waits at once (SendOpts.WaitsNow) is copied and so
// complete (origin counter fired) when it returns, rather than a round
// trip later; without WaitsNow, or above NetCopyThreshold, it is not.
// Every message arrives intact.
func TestWaitsNowCopies(t *testing.T) {
	j := newMixedJob(t, 4, faults.Spec{})
	defer j.close()
	c0 := j.ctxs[0]
	k := &checker{t: t, me: 2, seen: map[[2]uint32]bool{}}
	var h HandlerID
	for r, c := range j.ctxs {
		if r == 2 {
			h = c.RegisterHandler(k)
		} else {
			c.RegisterHandler(&checker{t: t, seen: map[[2]uint32]bool{}})
		}
	}
	for i, tc := range []struct {
		size       int
		waitsNow   bool
		doneAtOnce bool
	}{
		{32 << 10, true, true},
		{32 << 10, false, false},
		{NetCopyThreshold, true, true},
		{NetCopyThreshold + 1, true, false},
	} {
		var u [12]byte
		binary.LittleEndian.PutUint32(u[4:], uint32(i))
		org := c0.NewCounter()
		if err := c0.Amsend(2, h, u[:], pattern[:tc.size], SendOpts{Origin: org, WaitsNow: tc.waitsNow}); err != nil {
			t.Fatal(err)
		}
		if got := org.Value() == 1; got != tc.doneAtOnce {
			t.Errorf("%d bytes, WaitsNow %v: complete when Amsend returned %v, want %v", tc.size, tc.waitsNow, got, tc.doneAtOnce)
		}
		j.run(time.Second, nil, func() bool { return org.Value() == 1 && k.got == i+1 })
		if k.err != nil {
			t.Fatal(k.err)
		}
	}
}
