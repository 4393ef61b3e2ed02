package lapi

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestMulticastStaleFrameOfEarlierID: a multicast frame of an earlier
// broadcast that had the same id (ids name the broadcasts "in flight";
// the earlier one is over at every member), delayed on the wire until
// the receiver has posted the later one, must not be placed in the later
// one's buffer: the receiver ends with the root's data of the later call.
func TestMulticastStaleFrameOfEarlierID(t *testing.T) {
	const mtu = 4096
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1}, simnet.WithMTU(mtu))
	defer j.close()
	const id = 21
	group := []hal.Rank{0, 1}
	total := 3*(mtu-hal.McastHdrLen) + 10 // 4 frames
	captured := captureFrames(j, hal.FrameMcast, 100, 1, rand.New(rand.NewPCG(1, 1)))
	call := func(seed uint64, between func()) []byte {
		want := make([]byte, total)
		fill(want, seed)
		bufs := [][]byte{append([]byte(nil), want...), make([]byte, total)}
		dones := []*Counter{j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()}
		if err := j.ctxs[1].Multicast(group, 0, id, bufs[1], McastOpts{Done: dones[1]}); err != nil {
			t.Fatal(err)
		}
		between()
		if err := j.ctxs[0].Multicast(group, 0, id, bufs[0], McastOpts{Done: dones[0]}); err != nil {
			t.Fatal(err)
		}
		if !j.runFor(time.Minute, func() bool { return settled(dones[0], 1) && settled(dones[1], 1) }) {
			t.Fatalf("multicast %d did not end: done %d/%v, %d/%v", seed, dones[0].Value(), dones[0].err, dones[1].Value(), dones[1].err)
		}
		for r, k := range dones {
			if k.err != nil {
				t.Fatalf("multicast %d rank %d: %v", seed, r, k.err)
			}
		}
		j.runFor(time.Second, func() bool { return false })
		return bytes.Clone(bufs[1])
	}
	if got := call(1, func() {}); len(*captured) == 0 {
		t.Fatal("no multicast frame captured")
	} else {
		want := make([]byte, total)
		fill(want, 1)
		if !bytes.Equal(got, want) {
			t.Fatal("first multicast: the receiver's buffer differs")
		}
	}
	old := append([]capturedFrame(nil), (*captured)...)
	j.net.SetFilter(nil)
	got := call(2, func() {
		// The receiver has posted the second call; the first call's
		// frames, delayed on the wire, arrive before the root calls.
		// (Its first frame alone: with every frame the receiver would
		// be done before the root called.)
		var h hal.McastHdr
		for _, f := range old {
			if _, err := hal.DecodeMcast(f.frame[hal.HeaderLen:], &h); err == nil && f.dst == 1 && h.Offset == 0 {
				j.net.Inject(f.src, f.dst, f.frame)
			}
		}
		j.runFor(time.Second, func() bool { return false })
	})
	want := make([]byte, total)
	fill(want, 2)
	old1 := make([]byte, total)
	fill(old1, 1)
	if !bytes.Equal(got, want) {
		n := 0
		for i := range got {
			if got[i] != want[i] {
				n++
			}
		}
		t.Errorf("second multicast with id %d completed without error, but %d of the receiver's %d bytes differ from the root's (the first call's: %v; stats %+v)",
			id, n, total, bytes.Equal(got[:mtu-hal.McastHdrLen], old1[:mtu-hal.McastHdrLen]), j.ctxs[1].McastStats())
	}
}

// TestMulticastIDAfterAbort: a root that aborted keeps no receiver's
// ready message of the aborted call (arriving after the abort, it stayed
// in the early table for ever), and a later multicast that every member
// calls with the same id is not started on it: it completes, exact.
func TestMulticastIDAfterAbort(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	const id = 23
	group := []hal.Rank{0, 1}
	cause := errors.New("the call gave up")
	d0, d1 := j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()
	if err := j.ctxs[0].Multicast(group, 0, id, make([]byte, 5000), McastOpts{Done: d0}); err != nil {
		t.Fatal(err)
	}
	j.ctxs[0].AbortMulticast(id, cause)
	if err := j.ctxs[1].Multicast(group, 0, id, make([]byte, 5000), McastOpts{Done: d1}); err != nil {
		t.Fatal(err)
	}
	j.runFor(time.Second, func() bool { return false }) // the ready arrives at the root
	j.ctxs[1].AbortMulticast(id, cause)
	j.runFor(time.Second, func() bool { return false })
	if !errors.Is(d0.err, ErrBcastAborted) || !errors.Is(d1.err, ErrBcastAborted) {
		t.Fatalf("aborted: %v, %v", d0.err, d1.err)
	}
	for r, c := range j.ctxs {
		c.mu.Lock()
		tb := c.coll.mcastTable()
		live, early := len(tb.live), len(tb.early)
		c.mu.Unlock()
		if live != 0 || early != 0 {
			t.Errorf("rank %d after both members aborted: %d multicasts live, %d ids with early readies kept", r, live, early)
		}
	}
	want := make([]byte, 5000)
	fill(want, 6)
	bufs := [][]byte{append([]byte(nil), want...), make([]byte, len(want))}
	dones := []*Counter{j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()}
	for _, r := range []int{0, 1} {
		if err := j.ctxs[r].Multicast(group, 0, id, bufs[r], McastOpts{Done: dones[r]}); err != nil {
			t.Fatal(err)
		}
	}
	if !j.runFor(time.Minute, func() bool { return settled(dones[0], 1) && settled(dones[1], 1) }) {
		t.Fatalf("the second multicast did not end: done %d/%v, %d/%v", dones[0].Value(), dones[0].err, dones[1].Value(), dones[1].err)
	}
	for r, k := range dones {
		if k.err != nil {
			t.Errorf("second multicast with the id, rank %d: %v", r, k.err)
		}
	}
	if !bytes.Equal(bufs[1], want) {
		t.Errorf("second multicast with the id: the receiver's buffer differs")
	}
}
