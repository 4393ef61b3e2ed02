package simnet_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// mcastFrame is a sealed multicast frame from src numbered i.
func mcastFrame(src hal.Rank, i uint32) (hdr, payload []byte) {
	payload = make([]byte, 64)
	binary.LittleEndian.PutUint32(payload, i)
	hdr = make([]byte, hal.HeaderLen)
	hal.EncodeHeader(hdr, &hal.Header{Type: hal.FrameMcast, Len: uint16(len(payload)), JobKey: simnet.DefaultJobKey, Src: src, Dst: hal.BroadcastRank})
	hal.Seal(hdr, payload)
	return hdr, payload
}

// TestBroadcast: a broadcast frame reaches every rank but the sender, each
// copy lost or duplicated on its own (the ranks lose different frames),
// the network's accounting covers every copy, a cut link loses only its
// own copies, and a frame that is not multicast to hal.BroadcastRank is
// refused.
func TestBroadcast(t *testing.T) {
	const size, frames = 5, 400
	n := newNet(t, size, faults.Spec{Seed: 7, Loss: 0.2, Dup: 0.1})
	if !n.Device(0).Caps().Broadcast {
		t.Fatal("simnet device does not report Caps.Broadcast")
	}
	b := n.Device(1).(hal.Broadcaster)
	n.Cut(1, 4)
	for i := range uint32(frames) {
		if err := b.SendBroadcast(mcastFrame(1, i)); err != nil {
			t.Fatal(err)
		}
	}
	for n.Step() {
	}
	got := make([]map[uint32]int, size)
	delivered := 0
	for r := range hal.Rank(size) {
		got[r] = map[uint32]int{}
		if _, err := n.Device(r).Poll(func(h *hal.Header, p []byte) {
			if h.Dst != hal.BroadcastRank || h.Src != 1 || !hal.ForRank(h, r) {
				t.Errorf("rank %d got %+v", r, h)
			}
			got[r][binary.LittleEndian.Uint32(p)]++
			delivered++
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got[1]) != 0 || len(got[4]) != 0 {
		t.Errorf("the sender got %d frames, the rank behind a cut link %d", len(got[1]), len(got[4]))
	}
	same := true
	for r := 2; r < 4; r++ {
		if len(got[r]) < frames/2 || len(got[r]) == frames {
			t.Errorf("rank %d got %d distinct frames of %d with 20%% loss", r, len(got[r]), frames)
		}
		for i := range uint32(frames) {
			same = same && (got[r][i] > 0) == (got[0][i] > 0)
		}
	}
	if same {
		t.Error("every rank lost the same frames: the copies are not decided apart")
	}
	s := n.Stats()
	offered, dropped, dup := s.Offered.Load(), s.Dropped.Load(), s.Duplicated.Load()
	if offered != frames*(size-1) {
		t.Errorf("offered %d copies, want %d", offered, frames*(size-1))
	}
	// Every copy offered was delivered, dropped, or lost on the cut link.
	if uint64(delivered)+s.Cut.Load() != offered-dropped+dup {
		t.Errorf("delivered %d + cut %d != offered %d - dropped %d + duplicated %d", delivered, s.Cut.Load(), offered, dropped, dup)
	}
	if sent := n.Device(1).Counters().FramesSent.Load(); sent != frames {
		t.Errorf("sender counted %d frames, want %d", sent, frames)
	}

	hdr, payload := mcastFrame(1, 0)
	hdr[3] = byte(hal.FrameData)
	if err := b.SendBroadcast(hdr, payload); !errors.Is(err, hal.ErrBadFrame) {
		t.Errorf("broadcast of a data frame: %v", err)
	}
	hdr, payload = mcastFrame(1, 0)
	binary.LittleEndian.PutUint32(hdr[28:], 2)
	if err := b.SendBroadcast(hdr, payload); !errors.Is(err, hal.ErrBadFrame) {
		t.Errorf("broadcast to rank 2: %v", err)
	}
}

// TestBroadcastNoResource: a broadcast needs room for a copy per peer
// among the frames in flight, and gets it back as they arrive.
func TestBroadcastNoResource(t *testing.T) {
	n := newNet(t, 4, faults.Spec{Seed: 1}, simnet.WithLimits(5, 100))
	b := n.Device(0).(hal.Broadcaster)
	if err := b.SendBroadcast(mcastFrame(0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.SendBroadcast(mcastFrame(0, 2)); !errors.Is(err, hal.ErrNoResource) {
		t.Fatalf("second broadcast with 3 of 5 in flight: %v", err)
	}
	n.Step()
	if err := b.SendBroadcast(mcastFrame(0, 2)); err != nil {
		t.Fatalf("after delivery: %v", err)
	}
}
