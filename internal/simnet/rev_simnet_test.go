package simnet_test

import (
	"context"
	"encoding/binary"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestRevInjectWakesWait: Wait "blocks only when nothing at all is on its
// way, until another goroutine sends to it". Inject puts a frame on its way
// (inbound++), but unlike sendTo it does not signal the destination's
// notify channel, so a Wait already blocked sleeps on with a frame in
// flight toward it (until ctx, i.e. for ever in a test without one).
func TestRevInjectWakesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newNet(t, 2, faults.Spec{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		woke := make(chan error, 1)
		go func() { woke <- n.Device(1).Wait(ctx) }()
		synctest.Wait() // Wait is blocked: nothing on its way
		frame := make([]byte, hal.HeaderLen)
		hal.EncodeHeader(frame, &hal.Header{Type: hal.FrameData, JobKey: simnet.DefaultJobKey, Src: 0, Dst: 1})
		hal.Seal(frame, nil)
		if err := n.Inject(0, 1, frame); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-woke:
			if err != nil {
				t.Errorf("Wait after Inject: %v", err)
			}
		default:
			t.Errorf("Wait still blocked with %d frame(s) injected toward it", n.InFlight())
			cancel()
			<-woke
		}
	})
}

// TestRevInFlightLimit: WithLimits(inFlight, ...) is "how many frames one
// rank may have in flight before Send returns hal.ErrNoResource", and
// InFlight counts copies; sendable checks room for one copy, then the
// decider's duplicate puts a second one on the wire past the limit.
func TestRevInFlightLimit(t *testing.T) {
	const limit = 3
	n := newNet(t, 2, faults.Spec{Dup: 1, Seed: 1}, simnet.WithLimits(limit, 100))
	for range limit {
		send(t, n, 0, 1, nil) // refusals are fine
	}
	if got := n.InFlight(); got > limit {
		t.Errorf("rank 0 has %d copies in flight, limit %d", got, limit)
	}
}

// TestRevDuplicatesEverLate: a duplicate is the case a receiver's
// duplicate suppression must survive when it arrives late, after other
// frames (its original acknowledged, the window moved on). The decider
// gives both copies the same hold (faults.Decision: "All copies get the
// same corruption and hold") and simnet puts them on the wire with
// consecutive sequence numbers, so the copy always lands right behind its
// original: with 30% duplication and 50% reordering over 2000 frames, no
// duplicate is ever separated from its original by another frame.
func TestRevDuplicatesEverLate(t *testing.T) {
	n := newNet(t, 2, faults.Spec{Dup: 0.3, Reorder: 0.5, Delay: 100 * time.Microsecond, Seed: 1})
	var order []uint32
	collect := func() {
		n.Device(1).Poll(func(_ *hal.Header, p []byte) { order = append(order, binary.LittleEndian.Uint32(p)) })
	}
	for i := range uint32(2000) {
		p := make([]byte, 4)
		binary.LittleEndian.PutUint32(p, i)
		if err := send(t, n, 0, 1, p); err != nil {
			t.Fatal(err)
		}
		n.Advance(time.Microsecond)
		collect()
	}
	for n.Step() {
		collect()
	}
	last := map[uint32]int{}
	dups, late := 0, 0
	for pos, id := range order {
		if prev, ok := last[id]; ok {
			dups++
			if pos-prev > 1 {
				late++
			}
		}
		last[id] = pos
	}
	overtaken := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			overtaken++
		}
	}
	t.Logf("%d frames delivered, %d overtaken, %d duplicates, %d of them after another frame", len(order), overtaken, dups, late)
	if dups == 0 || late == 0 {
		t.Errorf("%d duplicates, none arrived after any other frame: duplication never exercises a late copy", dups)
	}
}
