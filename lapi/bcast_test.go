package lapi

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

var bcastSeeds = flag.Int("bcastseeds", 8, "TestBroadcastHostile: how many seeds")

// collCase is one broadcast of a property test (Broadcast's or
// Multicast's), seen from every member.
type collCase struct {
	id                uint64
	group             []hal.Rank
	root              int
	bufs              [][]byte // by group index
	want              []byte
	landed, done, all []*Counter
	called, checked   []bool
}

// setUp gives the case total bytes to broadcast (filled from seed), a
// buffer per member (the root's holding them, the others other bytes) and
// each member's counters.
func (cc *collCase) setUp(j *simJob, total int, seed uint64) {
	cc.want = make([]byte, total)
	fill(cc.want, seed)
	for g := range cc.group {
		b := make([]byte, total)
		if g == cc.root {
			copy(b, cc.want)
		} else {
			fill(b, uint64(g)) // not the root's bytes
		}
		cc.bufs = append(cc.bufs, b)
		c := j.ctxs[cc.group[g]]
		cc.landed = append(cc.landed, c.NewCounter())
		cc.done = append(cc.done, c.NewCounter())
		cc.all = append(cc.all, c.NewCounter())
	}
	cc.called = make([]bool, len(cc.group))
	cc.checked = make([]bool, len(cc.group))
}

// capturedFrame is a frame taken off the simulated wire, to replay.
type capturedFrame struct {
	src, dst hal.Rank
	frame    []byte
}

// captureFrames has j's network keep copies of frames of type ft, up to
// max of them, each taken when pick.IntN(every) is 0.
func captureFrames(j *simJob, ft hal.FrameType, max, every int, pick *rand.Rand) *[]capturedFrame {
	var captured []capturedFrame
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		if len(f) > 4 && hal.FrameType(f[3]) == ft && len(captured) < max && pick.IntN(every) == 0 {
			captured = append(captured, capturedFrame{src, dst, append([]byte(nil), f...)})
		}
		return true
	})
	return &captured
}

// bcastCase is one broadcast of TestBroadcastHostile.
type bcastCase struct {
	collCase
	tree          BcastTree
	chunk, window int
	pull          bool
}

// TestBroadcastHostile: broadcasts over the hostile simulated network
// (20% loss, 10% reordering, 5% duplication, 1% corruption), several in
// flight at once, each among a random subset of 1 to 9 ranks in a random
// order, from a random root, of 0 bytes up to 3 MiB in chunks of 4 KiB
// to 1 MiB, along a chain or a binomial tree, with 1, 2, 3 or any number
// of chunks in flight to a child, each parent writing or each child
// reading (Pull); the members call Broadcast
// in a random order, some only after their children's ready messages have
// arrived. Every member's buffer ends byte-exact; Landed (receivers),
// Done (everyone) and All (the root) each reach exactly 1 and stay there
// while the network drains; every receiver's buffer is overwritten as soon
// as its Done fires, and at the end every RDMA data frame captured on the
// wire is replayed twice: nothing may be written into memory after it
// was reported complete.
func TestBroadcastHostile(t *testing.T) {
	seeds := *bcastSeeds
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			spec := hostile
			spec.Seed = seed
			const n = 9
			j := newRDMAJob(t, n, spec, simnet.WithMTU(16<<10))
			defer j.close()
			rng := rand.New(rand.NewPCG(seed, 31))
			var cases []*bcastCase
			for i := range 5 {
				size := 1 + rng.IntN(n)
				perm := rng.Perm(n)[:size]
				bc := &bcastCase{collCase: collCase{id: seed<<32 | uint64(i), root: rng.IntN(size)}, tree: BcastTree(rng.IntN(2)),
					chunk: []int{4 << 10, 64 << 10, 1 << 20}[rng.IntN(3)], window: []int{0, -1, 1, 3}[rng.IntN(4)], pull: rng.IntN(2) == 0}
				for _, r := range perm {
					bc.group = append(bc.group, hal.Rank(r))
				}
				bc.setUp(j, []int{0, 1, 5000, 300 << 10, 3 << 20}[rng.IntN(5)], seed*1000+uint64(i))
				cases = append(cases, bc)
			}
			captured := captureFrames(j, hal.FrameRDMAWrite, 3000, 8, rand.New(rand.NewPCG(seed, 32)))
			// The members call in a random order, a few per step.
			type call struct{ bc, g int }
			var calls []call
			for ci, bc := range cases {
				for g := range bc.group {
					calls = append(calls, call{ci, g})
				}
			}
			rng.Shuffle(len(calls), func(a, b int) { calls[a], calls[b] = calls[b], calls[a] })
			step := func() {
				for k := 0; k < 2 && len(calls) > 0; k++ {
					cl := calls[0]
					calls = calls[1:]
					bc := cases[cl.bc]
					g := cl.g
					bc.called[g] = true
					err := j.ctxs[bc.group[g]].Broadcast(bc.group, bc.root, bc.id, bc.bufs[g],
						BcastOpts{Tree: bc.tree, Chunk: bc.chunk, Window: bc.window, Pull: bc.pull, Landed: bc.landed[g], Done: bc.done[g], All: bc.all[g]})
					if err != nil {
						t.Fatalf("broadcast %#x member %d: %v", bc.id, g, err)
					}
				}
			}
			left := 0
			for _, bc := range cases {
				left += len(bc.group)
			}
			check := func() bool {
				for _, bc := range cases {
					for g := range bc.group {
						if bc.checked[g] || !bc.called[g] || bc.done[g].Value() < 1 {
							continue
						}
						if err := bc.done[g].err; err != nil {
							t.Fatalf("broadcast %#x member %d (rank %d): %v", bc.id, g, bc.group[g], err)
						}
						if !bytes.Equal(bc.bufs[g], bc.want) {
							t.Fatalf("broadcast %#x (%d B, tree %d, chunk %d) member %d (rank %d of group %v, root %d): buffer differs",
								bc.id, len(bc.want), bc.tree, bc.chunk, g, bc.group[g], bc.group, bc.root)
						}
						bc.checked[g] = true
						left--
						if g != bc.root {
							for k := range bc.bufs[g] { // reused at once: nothing late may land
								bc.bufs[g][k] = 0xEE
							}
						}
					}
				}
				return left == 0
			}
			for len(calls) > 0 {
				step()
				j.step()
				check()
			}
			j.runSettled(t, check)
			j.runSettled(t, func() bool {
				for _, bc := range cases {
					if !settled(bc.all[bc.root], 1) {
						return false
					}
				}
				return true
			})
			// Let late duplicates and completions come, then replay.
			for j.net.InFlight() > 0 {
				j.step()
			}
			snap := make([][][]byte, len(cases))
			for ci, bc := range cases {
				for _, b := range bc.bufs {
					snap[ci] = append(snap[ci], append([]byte(nil), b...))
				}
			}
			for range 2 {
				for _, f := range *captured {
					j.net.Inject(f.src, f.dst, f.frame)
				}
			}
			for j.net.InFlight() > 0 {
				j.step()
			}
			for _, c := range j.ctxs {
				c.Progress()
			}
			for ci, bc := range cases {
				for g := range bc.group {
					if !bytes.Equal(snap[ci][g], bc.bufs[g]) {
						t.Fatalf("broadcast %#x member %d: a replayed packet wrote the buffer after Done", bc.id, g)
					}
					want := map[string]struct {
						k *Counter
						n int64
					}{"Done": {bc.done[g], 1}, "Landed": {bc.landed[g], 1}, "All": {bc.all[g], 1}}
					if g == bc.root {
						want["Landed"] = struct {
							k *Counter
							n int64
						}{bc.landed[g], 0}
					} else {
						want["All"] = struct {
							k *Counter
							n int64
						}{bc.all[g], 0}
					}
					for name, w := range want {
						if v, err := w.k.Value(), w.k.err; v != w.n || err != nil {
							t.Errorf("broadcast %#x member %d: %s reached %d (want %d), err %v", bc.id, g, name, v, w.n, err)
						}
					}
				}
			}
			var st RDMAStats
			for ci, c := range j.ctxs {
				s := c.RDMAStats()
				st.Redrives += s.Redrives
				st.Engine.Stale += s.Engine.Stale
				st.Engine.Duplicates += s.Engine.Duplicates
				if tb := c.coll.bcastTable(); len(tb.live) != 0 || len(tb.early) != 0 {
					t.Errorf("rank %d: %d broadcasts still live, %d early readies kept", ci, len(tb.live), len(tb.early))
				}
			}
			t.Logf("%d broadcasts, %d captured frames replayed twice; redrives %d, stale %d, duplicates %d",
				len(cases), len(*captured), st.Redrives, st.Engine.Stale, st.Engine.Duplicates)
		})
	}
}

// runSettled is simJob.run for protocols that send from the completion
// runner: a message sent there, after the pass's timers ran, has its
// retransmission timer armed by the next pass, so a stall is declared only
// when a further pass on every context arms no timer either (a message
// the network dropped at once would otherwise look like one).
func (j *simJob) runSettled(t *testing.T, done func() bool) {
	t.Helper()
	start := j.net.Now()
	for !done() {
		for range 2 {
			for _, c := range j.ctxs {
				c.Progress()
			}
		}
		if done() {
			return
		}
		now := j.net.Now()
		next, ok := j.nextEvent()
		for _, c := range j.ctxs {
			c.mu.Lock()
			if tk := c.rel.nextTick; !tk.IsZero() && (!ok || tk.Before(next)) {
				next, ok = tk, true
			}
			c.mu.Unlock()
		}
		if !ok {
			t.Fatalf("stalled at %v: nothing in flight, no timer, not done\n%s", now.Sub(start), j.dump())
		}
		if now.Sub(start) > 10*time.Minute {
			t.Fatalf("not done after 10m of virtual time")
		}
		j.advance(next.Sub(now))
	}
}

// TestBroadcastEdges: a broadcast that is not well formed is refused; a
// member whose parent failed fails its counters with the peer's error;
// members that disagree about the length fail with it; an
// aborted one fails its counters, disarms its forwards and releases its
// buffer.
func TestBroadcastEdges(t *testing.T) {
	j := newRDMAJob(t, 3, hostile)
	defer j.close()
	c := j.ctxs[0]
	buf := make([]byte, 100)
	for name, err := range map[string]error{
		"not a member":  c.Broadcast([]hal.Rank{1, 2}, 0, 1, buf, BcastOpts{}),
		"twice":         c.Broadcast([]hal.Rank{0, 1, 0}, 0, 1, buf, BcastOpts{}),
		"root":          c.Broadcast([]hal.Rank{0, 1}, 2, 1, buf, BcastOpts{}),
		"chunk":         c.Broadcast([]hal.Rank{0, 1}, 0, 1, buf, BcastOpts{Chunk: 2 << 20}),
		"tree":          c.Broadcast([]hal.Rank{0, 1}, 0, 1, buf, BcastOpts{Tree: 7}),
		"other counter": c.Broadcast([]hal.Rank{0, 1}, 0, 1, buf, BcastOpts{Done: j.ctxs[1].NewCounter()}),
	} {
		if !errors.Is(err, ErrBcast) {
			t.Errorf("%s: %v, want ErrBcast", name, err)
		}
	}
	if err := c.Broadcast([]hal.Rank{0, 7}, 0, 1, buf, BcastOpts{}); !errors.Is(err, ErrBadRank) {
		t.Errorf("bad rank: %v", err)
	}
	// Rank 2 waits for rank 1, which fails.
	landed := j.ctxs[2].NewCounter()
	if err := j.ctxs[2].Broadcast([]hal.Rank{0, 1, 2}, 0, 2, make([]byte, 1000), BcastOpts{Landed: landed}); err != nil {
		t.Fatal(err)
	}
	j.ctxs[2].mu.Lock()
	j.ctxs[2].rel.failPeer(1, "test")
	j.ctxs[2].mu.Unlock()
	j.run(time.Minute, nil, func() bool { return settled(landed, 1) })
	if !errors.Is(landed.err, ErrPeerFailed) {
		t.Errorf("landed failed with %v, want ErrPeerFailed", landed.err)
	}
	// Rank 2 expects fewer bytes than its parent, rank 1, has: both fail
	// with the lengths, and the root's part still completes.
	j3 := newRDMAJob(t, 3, hostile)
	defer j3.close()
	dones := []*Counter{j3.ctxs[0].NewCounter(), j3.ctxs[1].NewCounter(), j3.ctxs[2].NewCounter()}
	for r, n := range []int{5000, 5000, 4000} {
		if err := j3.ctxs[r].Broadcast([]hal.Rank{0, 1, 2}, 0, 4, make([]byte, n), BcastOpts{Chunk: 1000, Done: dones[r]}); err != nil {
			t.Fatal(err)
		}
	}
	j3.runSettled(t, func() bool { return settled(dones[0], 1) && settled(dones[1], 1) && settled(dones[2], 1) })
	for r, want := range []*BcastLengthError{nil, {Peer: 2, Len: 5000, Other: 4000}, {Peer: 1, Len: 4000, Other: 5000}} {
		var le *BcastLengthError
		switch err := dones[r].err; {
		case want == nil && err != nil:
			t.Errorf("rank %d: %v", r, err)
		case want != nil && (!errors.As(err, &le) || *le != *want || !errors.Is(err, ErrBcast)):
			t.Errorf("rank %d: %v, want %v", r, err, want)
		}
	}
	// Rank 1 forwards to rank 2 but its root never calls: aborted, its
	// counters fail with ErrBcastAborted, nothing stays armed, and its
	// buffer is released.
	j2 := newRDMAJob(t, 3, hostile)
	defer j2.close()
	done1, done2 := j2.ctxs[1].NewCounter(), j2.ctxs[2].NewCounter()
	buf1 := make([]byte, 5000)
	for r, k := range map[int]*Counter{2: done2, 1: done1} {
		b := buf1
		if r == 2 {
			b = make([]byte, 5000)
		}
		if err := j2.ctxs[r].Broadcast([]hal.Rank{0, 1, 2}, 0, 3, b, BcastOpts{Chunk: 1000, Done: k}); err != nil {
			t.Fatal(err)
		}
	}
	j2.run(time.Minute, nil, func() bool {
		c := j2.ctxs[1]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.coll.bcastTable().live[3].ready == 1 // rank 2's ready has come
	})
	c1 := j2.ctxs[1]
	c1.mu.Lock()
	armed, pvo1 := len(c1.trg.triggers), c1.coll.bcastTable().live[3].pvo
	c1.mu.Unlock()
	if armed == 0 {
		t.Fatalf("rank 1 armed nothing for its child")
	}
	cause := errors.New("the call was aborted")
	c1.AbortBroadcast(3, cause)
	j2.ctxs[2].AbortBroadcast(3, cause)
	for _, c := range j2.ctxs {
		c.Progress()
	}
	if !errors.Is(done1.err, ErrBcastAborted) || !errors.Is(done1.err, cause) || !errors.Is(done2.err, ErrBcastAborted) {
		t.Errorf("done: %v and %v, want ErrBcastAborted", done1.err, done2.err)
	}
	c1.mu.Lock()
	left, live := len(c1.trg.triggers), len(c1.coll.bcastTable().live)
	c1.mu.Unlock()
	if left != 0 || live != 0 {
		t.Errorf("after the abort rank 1 has %d triggers armed (%d before) and %d broadcasts live", left, armed, live)
	}
	if _, err := c1.TPT().Resolve(pvo1, 1, hal.AccessWrite); err == nil {
		t.Errorf("rank 1's buffer is still registered after the abort")
	}
}

// FuzzBcastMsg: decoding a broadcast control message never panics, and
// what decodes encodes back to the same bytes.
func FuzzBcastMsg(f *testing.F) {
	for _, m := range []bcastMsg{
		{kind: bcastReady, id: 7, chunks: 3, total: 3000, pvo: hal.PVO{Entry: 2, Offset: 9, Key: 0xfeed}},
		{kind: bcastRefuse, id: 8, total: 12345},
		{kind: bcastHave, id: 1 << 63},
		{kind: bcastOffer, id: 9, pvo: hal.PVO{Entry: 1, Key: 5}},
		{kind: bcastGot, id: 10},
		{kind: bcastReady, id: 11}, // a receiver of 0 bytes
		{kind: bcastOffer, id: 12}, // a parent of 0 bytes took the length
		{kind: bcastLost, id: 13},
	} {
		b := make([]byte, bcastMsgLen)
		encodeBcastMsg(b, m)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeBcastMsg(b)
		if err != nil {
			return
		}
		back := make([]byte, bcastMsgLen)
		encodeBcastMsg(back, m)
		if !bytes.Equal(back, b) {
			t.Fatalf("decode(%x) = %+v encodes to %x", b, m, back)
		}
	})
}

// TestBroadcastPullAbortNothingLands: AbortBroadcast says "its buffer is
// released, so nothing more is written into it". A pulling receiver
// (BcastOpts.Pull) whose read of a chunk is in flight when it aborts must
// not have that read land in its buffer after AbortBroadcast returned.
func TestBroadcastPullAbortNothingLands(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	const id = 11
	group := []hal.Rank{0, 1}
	want := make([]byte, 5000)
	fill(want, 4)
	root, mine := append([]byte(nil), want...), make([]byte, len(want))
	// The root's answers to reads are held back until the receiver has
	// aborted.
	hold := true
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		ft := hal.FrameType(f[3])
		return !(hold && src == 0 && (ft == hal.FrameRDMAWrite || ft == hal.FrameRDMAReadResp))
	})
	done1 := j.ctxs[1].NewCounter()
	if err := j.ctxs[1].Broadcast(group, 0, id, mine, BcastOpts{Pull: true, Done: done1}); err != nil {
		t.Fatal(err)
	}
	if err := j.ctxs[0].Broadcast(group, 0, id, root, BcastOpts{Pull: true}); err != nil {
		t.Fatal(err)
	}
	reading := func() bool {
		c := j.ctxs[1]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rd.groups > 0 && c.rd.stats.Reads > 0
	}
	if !j.runFor(time.Minute, reading) {
		t.Fatal("the receiver never read")
	}
	j.ctxs[1].AbortBroadcast(id, errors.New("the call gave up"))
	if !errors.Is(done1.err, ErrBcastAborted) {
		t.Fatalf("done: %v, want ErrBcastAborted", done1.err)
	}
	for i := range mine {
		mine[i] = 0xEE // the caller reuses its buffer
	}
	hold = false
	j.runFor(time.Minute, func() bool {
		c := j.ctxs[1]
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rd.groups == 0 && j.net.InFlight() == 0
	})
	for i, b := range mine {
		if b != 0xEE {
			t.Fatalf("byte %d of the aborted receiver's buffer was written after AbortBroadcast returned (%#x); it now holds the root's data: %v",
				i, b, bytes.Equal(mine, want))
		}
	}
}

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
