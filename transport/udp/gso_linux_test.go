package udp

import (
	"bytes"
	"slices"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// Runs of equal-size frames to one peer go out as single UDP_SEGMENT
// messages and arrive intact, whether the receiver takes them coalesced
// (UDP_GRO) or the kernel cuts them up for it.
func TestGSORuns(t *testing.T) {
	a := openRank(t, 0, 3, Options{GSO: true, Batch: 128})
	b := openRank(t, 1, 3, Options{GSO: true})
	c := openRank(t, 2, 3, Options{})
	connect(t, a, 1, b.Addr())
	connect(t, a, 2, c.Addr())

	var frames []*frame
	queue := func(dst hal.Rank, n, size int) {
		for range n {
			p := bytes.Repeat([]byte{byte(len(frames))}, size)
			f := newFrame(0, dst, p)
			frames = append(frames, f)
			if err := a.Send(f.hdr[:], f.payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	queue(1, 40, 1000) // one run, ended by
	queue(1, 1, 500)   // a shorter frame
	queue(2, 3, 1000)  // another peer
	queue(1, 64, 1400) // cut at 64 KiB: 45, then 19 and
	queue(1, 2, 0)     // the first (shorter) header-only frame, then the other
	if got, want := a.tx.runs[:a.tx.coalesce()], []int{41, 3, 45, 20, 1}; !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.SendCalls != 1 || s.GSOFallbacks != 0 {
		t.Fatalf("stats %+v, want one sendmmsg and no fallback", s)
	}
	check := func(d *Device, want int) {
		for _, r := range recvN(t, d, want) {
			f := frames[r.payload0(t)]
			if r.h.Dst != d.cfg.Rank || !bytes.Equal(r.payload, f.payload) {
				t.Fatalf("rank %d got a damaged or misrouted frame %+v", d.cfg.Rank, r.h)
			}
		}
		if n := d.Counters().FramesRecv.Load(); n != uint64(want) || d.Counters().Dropped() != 0 {
			t.Fatalf("rank %d: %v, want %d frames", d.cfg.Rank, d.Counters(), want)
		}
	}
	check(b, 40+1+64+2)
	check(c, 3)
	t.Logf("rank 1 took 107 frames in %d recvmmsg calls", b.Stats().RecvCalls)
}

// payload0 identifies a frame queued by TestGSORuns (its filler byte is its
// index; header-only frames are the last two).
func (r received) payload0(t *testing.T) int {
	if len(r.payload) == 0 {
		return 40 + 1 + 3 + 64
	}
	return int(r.payload[0])
}

// With the default batch, a stream of full frames leaves in six runs of a
// whole GSO datagram (44 frames of 1,472 bytes at an Ethernet MTU), none
// cut at the batch, and a GSO device's receive ring holds MaxGROSlots
// coalesced buffers while a plain one holds a slot per frame of its batch
// at an Ethernet MTU, and no more than 2 MiB of them at a larger one.
func TestDefaultBatchRuns(t *testing.T) {
	a := openRank(t, 0, 2, Options{GSO: true})
	b := openRank(t, 1, 2, Options{})
	connect(t, a, 1, b.Addr())
	if got := a.Options().Batch; got != DefaultBatch {
		t.Fatalf("batch %d, want DefaultBatch %d", got, DefaultBatch)
	}
	for range a.Options().Batch {
		f := newFrame(0, 1, make([]byte, 1440))
		if err := a.Send(f.hdr[:], f.payload); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.tx.runs[:a.tx.coalesce()]; len(got) != 6 || slices.ContainsFunc(got, func(n int) bool { return n != 44 }) {
		t.Errorf("runs %v of a batch of %d full frames, want six runs of 44", got, a.Options().Batch)
	}
	if n := len(a.rx.msgs); n != min(DefaultBatch, MaxGROSlots) {
		t.Errorf("GSO device: %d receive slots, want %d", n, min(DefaultBatch, MaxGROSlots))
	}
	// A plain device's ring holds 2 MiB at most: at the loopback's MTU,
	// 32 slots; at an Ethernet MTU, a slot per frame of the batch.
	if n := len(b.rx.msgs); b.Caps().MTU < 60000 || n != MaxGROSlots {
		t.Errorf("plain device, MTU %d: %d receive slots, want %d", b.Caps().MTU, n, MaxGROSlots)
	}
	c := openRank(t, 1, 2, Options{MTU: 1472 - hal.HeaderLen})
	if n := len(c.rx.msgs); n != DefaultBatch {
		t.Errorf("plain device, MTU %d: %d receive slots, want %d", c.Caps().MTU, n, DefaultBatch)
	}
}
