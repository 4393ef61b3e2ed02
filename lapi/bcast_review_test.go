package lapi

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// TestBroadcastAllFailsWhenMemberFails: the root's All waits for every
// member's have message; a member whose data landed (so the root's Done
// fired) but which failed before its have message came must fail All
// (Broadcast: "the counters of o tell when it is done, or fail with the
// reason (a member failed ...)"), not leave it pending for ever.
func TestBroadcastAllFailsWhenMemberFails(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	const id = 9
	group := []hal.Rank{0, 1}
	want := make([]byte, 5000)
	fill(want, 3)
	bufs := [][]byte{append([]byte(nil), want...), make([]byte, len(want))}
	done0, all0 := j.ctxs[0].NewCounter(), j.ctxs[0].NewCounter()
	landed1 := j.ctxs[1].NewCounter()
	// Once rank 1's ready is in at the root, rank 1's active messages (its
	// have) are lost: rank 1 is dying.
	readyIn := func() bool {
		c := j.ctxs[0]
		c.mu.Lock()
		defer c.mu.Unlock()
		st := c.coll.bcastTable().live[id]
		return st != nil && st.ready == 1
	}
	dying := false
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		return !(dying && src == 1 && hal.FrameType(f[3]) == hal.FrameData)
	})
	if err := j.ctxs[1].Broadcast(group, 0, id, bufs[1], BcastOpts{Chunk: 1000, Landed: landed1}); err != nil {
		t.Fatal(err)
	}
	if err := j.ctxs[0].Broadcast(group, 0, id, bufs[0], BcastOpts{Chunk: 1000, Done: done0, All: all0}); err != nil {
		t.Fatal(err)
	}
	if !j.runFor(time.Minute, readyIn) {
		t.Fatal("rank 1's ready never came")
	}
	dying = true
	if !j.runFor(time.Minute, func() bool { return settled(done0, 1) && settled(landed1, 1) }) {
		t.Fatal("the data did not land")
	}
	if done0.err != nil || landed1.err != nil || !bytes.Equal(bufs[1], want) {
		t.Fatalf("done %v landed %v exact %v", done0.err, landed1.err, bytes.Equal(bufs[1], want))
	}
	// The root learns that rank 1 failed.
	j.ctxs[0].mu.Lock()
	j.ctxs[0].rel.failPeer(1, "test: rank 1 died")
	j.ctxs[0].mu.Unlock()
	j.runFor(2*time.Minute, func() bool { return settled(all0, 1) })
	if !settled(all0, 1) {
		t.Fatalf("root's All neither fired nor failed after member rank 1 failed (value %d, err %v)", all0.Value(), all0.err)
	}
	if all0.err == nil || !errors.Is(all0.err, ErrPeerFailed) {
		t.Errorf("root's All: value %d err %v, want ErrPeerFailed", all0.Value(), all0.err)
	}
}

// TestBroadcastIDAfterAbort: a member that aborted a broadcast keeps no
// state of it: a ready message its child sent before aborting too, which
// arrives after the parent's abort, is not kept for ever in the early
// table (a leak per aborted broadcast), and a later broadcast that every
// member calls with the same id (none is in flight: "id names the
// broadcast among those in flight") is not taken for the aborted one's
// child: it completes, exact.
func TestBroadcastIDAfterAbort(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	const id = 13
	group := []hal.Rank{0, 1}
	cause := errors.New("the call gave up")
	// First call: the root gives up before its child's ready came; then
	// the child gives up too.
	d0, d1 := j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()
	if err := j.ctxs[0].Broadcast(group, 0, id, make([]byte, 5000), BcastOpts{Chunk: 1000, Done: d0}); err != nil {
		t.Fatal(err)
	}
	j.ctxs[0].AbortBroadcast(id, cause)
	if err := j.ctxs[1].Broadcast(group, 0, id, make([]byte, 5000), BcastOpts{Chunk: 1000, Done: d1}); err != nil {
		t.Fatal(err)
	}
	j.runFor(time.Second, func() bool { return false }) // the ready arrives at the root
	j.ctxs[1].AbortBroadcast(id, cause)
	j.runFor(time.Second, func() bool { return false })
	if !errors.Is(d0.err, ErrBcastAborted) || !errors.Is(d1.err, ErrBcastAborted) {
		t.Fatalf("aborted: %v, %v", d0.err, d1.err)
	}
	for r, c := range j.ctxs {
		c.mu.Lock()
		tb := c.coll.bcastTable()
		live, early := len(tb.live), len(tb.early)
		c.mu.Unlock()
		if live != 0 || early != 0 {
			t.Errorf("rank %d after both members aborted: %d broadcasts live, %d ids with early messages kept", r, live, early)
		}
	}
	// Second call, same id, every member.
	want := make([]byte, 5000)
	fill(want, 5)
	bufs := [][]byte{append([]byte(nil), want...), make([]byte, len(want))}
	dones := []*Counter{j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()}
	for _, r := range []int{1, 0} {
		if err := j.ctxs[r].Broadcast(group, 0, id, bufs[r], BcastOpts{Chunk: 1000, Done: dones[r]}); err != nil {
			t.Fatal(err)
		}
	}
	if !j.runFor(time.Minute, func() bool { return settled(dones[0], 1) && settled(dones[1], 1) }) {
		t.Fatalf("the second broadcast did not end: done %d/%v, %d/%v", dones[0].Value(), dones[0].err, dones[1].Value(), dones[1].err)
	}
	for r, k := range dones {
		if k.err != nil {
			t.Errorf("second broadcast with the id, rank %d: %v", r, k.err)
		}
	}
	if !bytes.Equal(bufs[1], want) {
		t.Errorf("second broadcast with the id: the receiver's buffer differs")
	}
}

// TestBroadcastEmptyChildLengthError: members that disagree about the
// length fail with *BcastLengthError ("a child's ready message names
// another length than its parent's, and both fail with it"). A child
// whose buffer is empty sends no ready message; its parent, with 5000
// bytes, must still not wait for ever for it, nor report All (every member
// has the data) while its own Done never comes.
func TestBroadcastEmptyChildLengthError(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	const id = 17
	group := []hal.Rank{0, 1}
	done0, all0, done1 := j.ctxs[0].NewCounter(), j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()
	if err := j.ctxs[0].Broadcast(group, 0, id, make([]byte, 5000), BcastOpts{Done: done0, All: all0}); err != nil {
		t.Fatal(err)
	}
	if err := j.ctxs[1].Broadcast(group, 0, id, nil, BcastOpts{Done: done1}); err != nil {
		t.Fatal(err)
	}
	j.runFor(2*time.Minute, func() bool { return settled(done0, 1) && settled(done1, 1) })
	var le *BcastLengthError
	if !settled(done0, 1) || !errors.As(done0.err, &le) {
		t.Errorf("root (5000 bytes): Done %d err %v; All %d err %v; want a BcastLengthError", done0.Value(), done0.err, all0.Value(), all0.err)
	}
	if all0.Value() > 0 && all0.err == nil {
		t.Errorf("root: All fired without error, but its only receiver has 0 of its 5000 bytes")
	}
	if !errors.As(done1.err, &le) {
		t.Errorf("receiver (0 bytes): Done %d err %v, want a BcastLengthError", done1.Value(), done1.err)
	}
}
