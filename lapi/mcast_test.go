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

var mcastSeeds = flag.Int("mcastseeds", 8, "TestMulticastHostile: how many seeds")

// TestMulticastHostile: multicast broadcasts over the hostile simulated
// network (20% loss, 10% reordering, 5% duplication, 1% corruption of
// every copy, the multicast frames' copies decided apart per receiver),
// several in flight at once, each among a random subset of 2 to 7 of 8
// ranks from a random root, of 0 bytes to 3 MiB, the members calling in a
// random order. Every member's buffer ends byte-exact; Landed
// (receivers), Done (everyone) and All (the root) each reach exactly 1;
// receivers repair by Get (counted) what the stream lost; the ranks
// outside a broadcast's group drop its frames and count them (Unposted);
// and every multicast frame captured on the wire, replayed twice after
// the receivers reused their buffers, is dropped and counted, never
// placed.
func TestMulticastHostile(t *testing.T) {
	seeds := *mcastSeeds
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			spec := hostile
			spec.Seed = seed
			const n = 8
			j := newRDMAJob(t, n, spec, simnet.WithMTU(16<<10), simnet.WithLimits(1<<16, 1<<16))
			defer j.close()
			if !j.ctxs[0].CanMulticast() {
				t.Fatal("CanMulticast is false on simnet")
			}
			rng := rand.New(rand.NewPCG(seed, 41))
			var cases []*collCase
			sizes := []int{0, 1, 5000, 300 << 10, 3 << 20}
			for i := range 4 {
				size := 2 + rng.IntN(n-2) // at least one rank stays out
				perm := rng.Perm(n)[:size]
				mc := &collCase{id: seed<<32 | uint64(i), root: rng.IntN(size)}
				for _, r := range perm {
					mc.group = append(mc.group, hal.Rank(r))
				}
				mc.setUp(j, sizes[i%len(sizes)+rng.IntN(2)*(len(sizes)-1-i%len(sizes))], seed*1000+uint64(i))
				cases = append(cases, mc)
			}
			captured := captureFrames(j, hal.FrameMcast, 2000, 4, rand.New(rand.NewPCG(seed, 42)))
			type call struct{ mc, g int }
			var calls []call
			for ci, mc := range cases {
				for g := range mc.group {
					calls = append(calls, call{ci, g})
				}
			}
			rng.Shuffle(len(calls), func(a, b int) { calls[a], calls[b] = calls[b], calls[a] })
			left := len(calls)
			check := func() bool {
				for _, mc := range cases {
					for g := range mc.group {
						if mc.checked[g] || !mc.called[g] || mc.done[g].Value() < 1 {
							continue
						}
						if err := mc.done[g].err; err != nil {
							t.Fatalf("multicast %#x member %d (rank %d): %v", mc.id, g, mc.group[g], err)
						}
						if !bytes.Equal(mc.bufs[g], mc.want) {
							t.Fatalf("multicast %#x (%d B) member %d (rank %d of group %v, root %d): buffer differs",
								mc.id, len(mc.want), g, mc.group[g], mc.group, mc.root)
						}
						mc.checked[g] = true
						left--
						if g != mc.root {
							for k := range mc.bufs[g] { // reused at once: nothing late may land
								mc.bufs[g][k] = 0xEE
							}
						}
					}
				}
				return left == 0
			}
			for len(calls) > 0 {
				for k := 0; k < 2 && len(calls) > 0; k++ {
					cl := calls[0]
					calls = calls[1:]
					mc := cases[cl.mc]
					mc.called[cl.g] = true
					err := j.ctxs[mc.group[cl.g]].Multicast(mc.group, mc.root, mc.id, mc.bufs[cl.g],
						McastOpts{Landed: mc.landed[cl.g], Done: mc.done[cl.g], All: mc.all[cl.g]})
					if err != nil {
						t.Fatalf("multicast %#x member %d: %v", mc.id, cl.g, err)
					}
				}
				j.step()
				check()
			}
			j.runSettled(t, check)
			for j.net.InFlight() > 0 {
				j.step()
			}
			before := make([]McastStats, n)
			for r, c := range j.ctxs {
				before[r] = c.McastStats()
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
			var total McastStats
			for r, c := range j.ctxs {
				s := c.McastStats()
				if s.Placed != before[r].Placed {
					t.Errorf("rank %d placed %d replayed frames", r, s.Placed-before[r].Placed)
				}
				if got := s.Unposted - before[r].Unposted; got != uint64(countTo(*captured, hal.Rank(r))) {
					t.Errorf("rank %d: %d replayed frames counted unposted, %d replayed toward it", r, got, countTo(*captured, hal.Rank(r)))
				}
				total.FramesSent += s.FramesSent
				total.Placed += s.Placed
				total.Repairs += s.Repairs
				total.RepairBytes += s.RepairBytes
				total.Unposted += before[r].Unposted
				total.Duplicates += s.Duplicates
				if tb := c.coll.mcastTable(); len(tb.live) != 0 || len(tb.early) != 0 {
					t.Errorf("rank %d: %d multicasts still live, %d early readies kept", r, len(tb.live), len(tb.early))
				}
			}
			for _, mc := range cases {
				for g := range mc.group {
					want := map[string][2]int64{"Done": {mc.done[g].Value(), 1}, "Landed": {mc.landed[g].Value(), 1}, "All": {mc.all[g].Value(), 0}}
					if g == mc.root {
						want["Landed"], want["All"] = [2]int64{mc.landed[g].Value(), 0}, [2]int64{mc.all[g].Value(), 1}
					}
					for name, w := range want {
						if w[0] != w[1] {
							t.Errorf("multicast %#x member %d: %s reached %d, want %d", mc.id, g, name, w[0], w[1])
						}
					}
				}
			}
			// With 20% loss, the stream lost frames and receivers read
			// them; the ranks outside a group saw its frames.
			if total.FramesSent > 0 && (total.Repairs == 0 || total.Unposted == 0) {
				t.Errorf("stats %+v: no repair or no unposted frame", total)
			}
			t.Logf("%d multicasts; stats %+v; %d captured frames replayed twice", len(cases), total, len(*captured))
		})
	}
}

// countTo counts the replays toward r of the captured frames that are
// intact (the others are corrupted copies, dropped by the device).
func countTo(captured []capturedFrame, r hal.Rank) int {
	n := 0
	var h hal.Header
	for _, f := range captured {
		if _, err := hal.Check(f.frame, simnet.DefaultJobKey, true, &h); err == nil && f.dst == r {
			n += 2
		}
	}
	return n
}

// TestMulticastRepairs: on a lossless network a receiver reads nothing;
// when the filter drops chosen frames toward one receiver, that receiver
// alone reads exactly the ranges they covered, one Get per run of lost
// frames, and every buffer is exact.
func TestMulticastRepairs(t *testing.T) {
	const n, mtu = 4, 4096
	j := newRDMAJob(t, n, faults.Spec{Seed: 3}, simnet.WithMTU(mtu))
	defer j.close()
	seg := mtu - hal.McastHdrLen
	total := 40*seg + 100 // 41 frames
	lost := map[int]bool{0: true, 1: true, 7: true, 40: true}
	var hdr hal.McastHdr
	var lossTag uint64 // the stream of multicast 2: its frames' id
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		if hal.FrameType(f[3]) != hal.FrameMcast || dst != 2 {
			return true
		}
		if _, err := hal.DecodeMcast(f[hal.HeaderLen:], &hdr); err != nil {
			t.Fatal(err)
		}
		return hdr.ID != lossTag || !lost[int(hdr.Offset)/seg]
	})
	for id := uint64(1); id <= 2; id++ {
		group := []hal.Rank{1, 0, 2, 3}
		want := make([]byte, total)
		fill(want, id)
		bufs := make([][]byte, n)
		done := make([]*Counter, n)
		for g, r := range group {
			bufs[g] = make([]byte, total)
			if g == 0 {
				copy(bufs[g], want)
			}
			done[g] = j.ctxs[r].NewCounter()
		}
		before := make([]McastStats, n)
		for r, c := range j.ctxs {
			before[r] = c.McastStats()
		}
		for g, r := range group {
			if err := j.ctxs[r].Multicast(group, 0, id, bufs[g], McastOpts{Done: done[g]}); err != nil {
				t.Fatal(err)
			}
		}
		if id == 2 {
			root := j.ctxs[group[0]]
			root.mu.Lock()
			lossTag = root.coll.mcastTable().live[id].tag
			root.mu.Unlock()
		}
		j.runSettled(t, func() bool {
			for _, k := range done {
				if !settled(k, 1) {
					return false
				}
			}
			return true
		})
		for g, r := range group {
			if done[g].err != nil || !bytes.Equal(bufs[g], want) {
				t.Fatalf("multicast %d rank %d: %v, exact %v", id, r, done[g].err, bytes.Equal(bufs[g], want))
			}
			s := j.ctxs[r].McastStats()
			repairs, bytes := s.Repairs-before[r].Repairs, s.RepairBytes-before[r].RepairBytes
			wantRepairs, wantBytes := uint64(0), uint64(0)
			if id == 2 && r == 2 {
				wantRepairs, wantBytes = 3, uint64(3*seg+100) // frames 0-1, 7, 40 (the short last one)
			}
			if repairs != wantRepairs || bytes != wantBytes {
				t.Errorf("multicast %d rank %d: %d repairs of %d bytes, want %d of %d", id, r, repairs, bytes, wantRepairs, wantBytes)
			}
		}
	}
}

// TestMulticastEdges: Multicast is refused where it cannot work or is not
// well formed; members that disagree about the length both fail with
// *BcastLengthError; an aborted member fails its counters.
func TestMulticastEdges(t *testing.T) {
	j := newRDMAJob(t, 3, faults.Spec{Seed: 5})
	defer j.close()
	c := j.ctxs[0]
	buf := make([]byte, 100)
	for name, err := range map[string]error{
		"not a member": c.Multicast([]hal.Rank{1, 2}, 0, 1, buf, McastOpts{}),
		"rank twice":   c.Multicast([]hal.Rank{0, 1, 1}, 0, 1, buf, McastOpts{}),
		"bad root":     c.Multicast([]hal.Rank{0, 1}, 2, 1, buf, McastOpts{}),
		"foreign ctr":  c.Multicast([]hal.Rank{0, 1}, 0, 1, buf, McastOpts{Done: j.ctxs[1].NewCounter()}),
	} {
		if !errors.Is(err, ErrBcast) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := c.Multicast([]hal.Rank{0, 5}, 0, 1, buf, McastOpts{}); !errors.Is(err, ErrBadRank) {
		t.Errorf("rank out of range: %v", err)
	}

	// Lengths that differ.
	d0, d1 := c.NewCounter(), j.ctxs[1].NewCounter()
	if err := c.Multicast([]hal.Rank{0, 1}, 0, 7, make([]byte, 100), McastOpts{Done: d0}); err != nil {
		t.Fatal(err)
	}
	if err := j.ctxs[1].Multicast([]hal.Rank{0, 1}, 0, 7, make([]byte, 101), McastOpts{Done: d1}); err != nil {
		t.Fatal(err)
	}
	j.runSettled(t, func() bool { return settled(d0, 1) && settled(d1, 1) })
	for r, k := range []*Counter{d0, d1} {
		var le *BcastLengthError
		if !errors.As(k.err, &le) {
			t.Errorf("rank %d: %v, want a BcastLengthError", r, k.err)
		}
	}

	// An abort fails the member's counters.
	d2 := j.ctxs[2].NewCounter()
	if err := j.ctxs[2].Multicast([]hal.Rank{0, 2}, 0, 8, make([]byte, 100), McastOpts{Done: d2}); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("gave up")
	j.ctxs[2].AbortMulticast(8, cause)
	if !errors.Is(d2.err, ErrBcastAborted) || !errors.Is(d2.err, cause) {
		t.Errorf("aborted: %v", d2.err)
	}
}

// TestMcastMap: the receiver's record of placed frames names exactly the
// ranges no frame covered.
func TestMcastMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		seg := uint32(1 + rng.IntN(100))
		total := uint64(1 + rng.IntN(20000))
		var m mcastMap
		covered := make([]bool, total)
		for range rng.IntN(int(frames(total, seg)) + 1) {
			off := uint64(rng.IntN(int(frames(total, seg)))) * uint64(seg)
			fresh := m.mark(total, seg, off)
			if fresh == covered[off] {
				t.Fatalf("mark(%d) fresh %v, covered %v", off, fresh, covered[off])
			}
			for i := off; i < min(off+uint64(seg), total); i++ {
				covered[i] = true
			}
		}
		var prev uint64
		first := true
		m.missing(total, seg, func(off, end uint64) {
			if off >= end || !first && off <= prev {
				t.Fatalf("range %d-%d after %d", off, end, prev)
			}
			for i := prev; i < off && !first; i++ {
				if !covered[i] {
					t.Fatalf("byte %d missing but not named", i)
				}
			}
			for i := off; i < end; i++ {
				if covered[i] {
					t.Fatalf("byte %d covered but named missing", i)
				}
				covered[i] = true
			}
			prev, first = end, false
		})
		for i, c := range covered {
			if !c {
				t.Fatalf("byte %d missing but not named", i)
			}
		}
	}
}

// FuzzMcastMsg: decodeMcastMsg never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzMcastMsg(f *testing.F) {
	for _, m := range []mcastMsg{{kind: mcastReady, id: 1, total: 5}, {kind: mcastEnd, id: 2, total: 9, pvo: hal.PVO{Entry: 1, Offset: 2, Key: 3}, seg: 1400, stream: 11},
		{kind: mcastDone, id: 3, stream: 12}, {kind: mcastRefuse, id: 4, total: 7}, {kind: mcastGo, id: 5, stream: 1 << 63}} {
		var b [mcastMsgLen]byte
		encodeMcastMsg(b[:], m)
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMcastMsg(b)
		if err != nil {
			if !errors.Is(err, ErrBcast) {
				t.Fatalf("error %v does not wrap ErrBcast", err)
			}
			return
		}
		var c [mcastMsgLen]byte
		encodeMcastMsg(c[:], m)
		if !bytes.Equal(b, c[:]) {
			t.Fatalf("re-encoded % x, was % x", c, b)
		}
	})
}

// TestMcastAllocs: taking a multicast frame (placed, duplicate, or of an
// id not posted) allocates nothing.
func TestMcastAllocs(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	c := j.ctxs[1]
	const seg, total = 1000, 64000
	if err := c.Multicast([]hal.Rank{0, 1}, 0, 5, make([]byte, total), McastOpts{}); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, hal.McastHdrLen+seg)
	off := uint64(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.coll.mcastTable().live[5].hearStream(5) // as the root's go would: its frames' id is 5
	allocs := testing.AllocsPerRun(200, func() {
		hal.EncodeMcast(frame, &hal.McastHdr{ID: 5, Total: total, Offset: off % total, Seg: seg})
		c.coll.onMcast(0, frame)
		hal.EncodeMcast(frame, &hal.McastHdr{ID: 6, Total: total, Offset: 0, Seg: seg})
		c.coll.onMcast(0, frame)
		off += seg
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame", allocs)
	}
	if s := c.coll.mcastTable().stats; s.Placed != total/seg || s.Unposted == 0 || s.Duplicates == 0 {
		t.Errorf("stats %+v", s)
	}
}

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
