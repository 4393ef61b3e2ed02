package lapi

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/simnet"
)

// revObserved reports what the faults of j's network did and what lapi saw
// of them, and whether each fault the spec asks for left a trace.
func revObserved(j *simJob) (string, []string) {
	var st Stats
	var crc, resent, engDup uint64
	for r, c := range j.ctxs {
		rd := c.RDMAStats()
		resent += rd.Resent
		engDup += rd.Engine.Duplicates + rd.Engine.Stale
		s := c.Stats()
		st.Retransmits += s.Retransmits
		st.Duplicates += s.Duplicates
		st.PacketsSent += s.PacketsSent
		crc += j.net.Device(hal.Rank(r)).Counters().Drops[hal.DropCRC].Load()
	}
	ns := j.net.Stats()
	msg := fmt.Sprintf("net: offered %d dropped %d duplicated %d corrupted %d delayed %d | receivers DropCRC %d | lapi: packets %d retransmits %d duplicates %d | rdma: resent %d engine dup+stale %d",
		ns.Offered.Load(), ns.Dropped.Load(), ns.Duplicated.Load(), ns.Corrupted.Load(), ns.Delayed.Load(), crc,
		st.PacketsSent, st.Retransmits, st.Duplicates, resent, engDup)
	var missing []string
	if ns.Dropped.Load() == 0 || st.Retransmits+resent == 0 {
		missing = append(missing, "loss")
	}
	if ns.Duplicated.Load() == 0 {
		missing = append(missing, "dup")
	}
	if ns.Corrupted.Load() == 0 || crc == 0 {
		missing = append(missing, "corrupt")
	}
	if ns.Delayed.Load() == 0 {
		missing = append(missing, "reorder")
	}
	return msg, missing
}

// TestRevPutGetHostileObserved is TestPutGetHostile (rma_test.go), which
// asserts nothing about the faults, with its counters printed: does each of
// the four faults it names actually happen to its traffic?
func TestRevPutGetHostileObserved(t *testing.T) {
	spec := hostile
	spec.Seed = 3
	j := newSimJob(t, 3, spec)
	defer j.close()
	region := make([]byte, 1<<20)
	pvo, err := j.ctxs[2].TPT().Register(region, hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	put, get := j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()
	off := 0
	for _, n := range []int{0, 1, 100, 4096, 70000, 300000} {
		if err := j.ctxs[0].Put(2, pvo.Add(uint64(off)), pattern[off:off+n], SendOpts{Completion: put}); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	j.run(time.Minute, nil, func() bool { return settled(put, 6) })
	back := make([]byte, off)
	if err := j.ctxs[1].Get(2, pvo, back, SendOpts{Origin: get}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return settled(get, 1) })
	if !bytes.Equal(back, pattern[:off]) {
		t.Fatal("get differs")
	}
	msg, missing := revObserved(j)
	t.Log(msg)
	if len(missing) > 0 {
		t.Errorf("faults named by the test that never happened: %v", missing)
	}
}

// TestRevRmwHostileObserved is TestRmwHostile (rma_test.go), which
// asserts nothing about the faults, with its counters printed.
func TestRevRmwHostileObserved(t *testing.T) {
	spec := hostile
	spec.Seed = 4
	j := newSimJob(t, 4, spec)
	defer j.close()
	cells := make([]int64, 4)
	pvo, err := j.ctxs[0].TPT().Register(int64Bytes(cells), hal.AccessRead|hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	const adds = 50
	ks := make([]*Counter, 4)
	for r, c := range j.ctxs {
		ks[r] = c.NewCounter()
		for range adds {
			if err := c.Rmw(0, FetchAndAdd, pvo, int64(r+1), 0, nil, SendOpts{Origin: ks[r]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	j.run(time.Minute, nil, func() bool {
		for _, k := range ks {
			if !settled(k, adds) {
				return false
			}
		}
		return true
	})
	c, k := j.ctxs[1], ks[1]
	k.v.Store(0)
	var prev [4]int64
	c.Rmw(0, Swap, pvo.Add(8), 9, 0, &prev[0], SendOpts{Origin: k})
	c.Rmw(0, CompareAndSwap, pvo.Add(16), 6, 5, &prev[1], SendOpts{Origin: k})
	c.Rmw(0, CompareAndSwap, pvo.Add(16), 8, 5, &prev[2], SendOpts{Origin: k})
	c.Rmw(0, FetchAndOr, pvo.Add(24), 0b1010, 0, &prev[3], SendOpts{Origin: k})
	j.run(time.Minute, nil, func() bool { return settled(k, 4) })
	msg, missing := revObserved(j)
	t.Log(msg)
	if len(missing) > 0 {
		t.Errorf("faults named by the test that never happened: %v", missing)
	}
}

// TestRevStormCorruptionReachesCRC: in the AM storm every corrupted copy
// that was delivered must be counted as DropCRC by a receiver (none may
// slip through, none may be counted under another reason).
func TestRevStormCorruptionReachesCRC(t *testing.T) {
	spec := hostile
	spec.Seed = 1
	j := newSimJob(t, 4, spec, simnet.WithMTU(16<<10))
	t.Log(amStormOn(t, j, 1, 2000, 1<<20, spec))
	for j.net.Step() {
	}
	var crc, other uint64
	for r := range 4 {
		c := j.net.Device(hal.Rank(r)).Counters()
		crc += c.Drops[hal.DropCRC].Load()
		other += c.Dropped() - c.Drops[hal.DropCRC].Load()
	}
	ns := j.net.Stats()
	t.Logf("corrupted %d, DropCRC %d, other drops %d, dead %d", ns.Corrupted.Load(), crc, other, ns.Dead.Load())
	if crc == 0 || other != 0 {
		t.Errorf("corrupted %d copies, receivers counted %d as DropCRC and %d otherwise", ns.Corrupted.Load(), crc, other)
	}
}
