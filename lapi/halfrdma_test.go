package lapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// fifoCall is one packet a FIFOHandler took.
type fifoCall struct {
	src       hal.Rank
	off       uint64
	addr, n   uintptr // where dst starts, and the packet's length
	dstLenBad bool    // dst and data differ in length
}

// fifoRecorder is a target's PutToFIFO handler: it copies each packet
// into the region slice it is addressed to, and records it.
type fifoRecorder struct{ calls []fifoCall }

func (f *fifoRecorder) OnFIFO(src hal.Rank, off uint64, dst, data []byte) {
	copy(dst, data)
	f.calls = append(f.calls, fifoCall{src: src, off: off, addr: uintptr(unsafe.Pointer(unsafe.SliceData(dst))),
		n: uintptr(len(data)), dstLenBad: len(dst) != len(data)})
}

// fifoSink is a GetToFIFO's handler: it scatters packets into buf by
// offset and counts each offset's arrivals.
type fifoSink struct {
	buf  []byte
	hits map[uint64]int
	bad  bool // a packet with a dst, from another rank, or past buf
	from hal.Rank
}

func (s *fifoSink) OnFIFO(src hal.Rank, off uint64, dst, data []byte) {
	if dst != nil || src != s.from || off+uint64(len(data)) > uint64(len(s.buf)) {
		s.bad = true
		return
	}
	copy(s.buf[off:], data)
	s.hits[off]++
}

// halfKind is what a halfCase does.
type halfKind uint8

const (
	hkFromFIFO halfKind = iota // PutFromFIFO
	hkToFIFO                   // PutToFIFO
	hkGet                      // GetToFIFO
	hkPut                      // Put, fire-and-forget
	hkGetFrom                  // GetFromFIFO
	nHalfKinds
)

// halfCase is one random transfer of the half-RDMA property test.
type halfCase struct {
	kind     halfKind
	none     bool // NoCompletion
	org, tgt int
	off, n   int // slot in the target's region (GetFromFIFO: the origin's)
	soff     int // where the data is in the origin's source region (GetFromFIFO: the target's)
	data     []byte
	sink     *fifoSink
	org1     *Counter // Completion, or Origin (reads, fire-and-forget)
	tgt1     *Counter // at the target (writes)
	checked  bool
}

// halfSize is a random transfer length: none, one byte, a few odd
// bytes, a few packets, or several chunks.
func halfSize(rng *rand.Rand) int {
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return 1 + 2*rng.IntN(700) // odd, within a packet
	case 3:
		return 1 + rng.IntN(40_000) // a few packets
	case 4:
		return 100_000 + rng.IntN(900_000)
	}
	return rdmaChunk + 1 + rng.IntN(2*rdmaChunk) // two or three chunks
}

// TestHalfRDMAHostile: random half-RDMA transfers of every kind (the
// half-receive write, the half-send write to a FIFO handler, the
// half-send read into a FIFO handler, and fire-and-forget Puts and
// writes) of 0 B to 3 MiB between 4 ranks under 20% loss, 10%
// reordering, 5% duplication and 1% corruption: every byte lands where it
// was sent, each packet reaches a FIFO handler exactly once, at the offset
// it carries, and every counter fires exactly once at each party. Every
// write's slot is then reused, and every RDMA data frame captured on the
// way is replayed twice: no packet of an abandoned or completed drive
// writes memory or reaches a handler.
func TestHalfRDMAHostile(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		halfHostile(t, seed)
	}
}

func halfHostile(t *testing.T, seed uint64) {
	spec := hostile
	spec.Seed = seed
	j := newRDMAJob(t, 4, spec)
	defer j.close()
	h := newHalfRun(t, j, seed, 36)
	captured := captureRDMA(j, seed)
	want := make([][]byte, len(h.cases)) // a read's: the slot's first contents
	for i, tc := range h.cases {
		at, from := tc.ends()
		want[i] = append([]byte(nil), h.mem[at][tc.off:tc.off+tc.n]...)
		startHalf(t, j, tc, h.pvo[at].Add(uint64(tc.off)), h.spvo[from].Add(uint64(tc.soff)),
			h.src[from][tc.soff:tc.soff+tc.n], seed*1000+uint64(i))
	}
	left := len(h.cases)
	check := func() {
		for i, tc := range h.cases {
			if tc.checked || tc.org1.Value() < 1 || tc.tgt1 != nil && tc.tgt1.Value() < 1 {
				continue
			}
			tc.checked = true
			left--
			at, _ := tc.ends()
			slot := h.mem[at][tc.off : tc.off+tc.n]
			if tc.kind == hkGet {
				checkSink(t, seed, i, tc, want[i])
				continue
			}
			if !bytes.Equal(slot, tc.data) {
				t.Fatalf("seed %d: %v write %d (%d B, none %v, rank %d to %d) differs", seed, tc.kind, i, tc.n, tc.none, tc.org, tc.tgt)
			}
			clear(slot) // reused at once: a late packet must not write it
		}
	}
	j.run(10*time.Minute, nil, func() bool { check(); return left == 0 })
	for r := range h.mem {
		checkCalls(t, seed, r, h.recs[r], h.cases, h.mem[r])
	}
	h.replay(*captured)
	for i, tc := range h.cases {
		if tc.org1.Value() != 1 || tc.tgt1 != nil && tc.tgt1.Value() != 1 {
			t.Fatalf("seed %d: case %d's counters fired %d times at the origin, %d at the target (-1: none), want 1",
				seed, i, tc.org1.Value(), tc.tgt1.valueOr(-1))
		}
		if tc.sink != nil {
			checkSink(t, seed, i, tc, want[i])
		}
	}
	var st RDMAStats
	for _, c := range j.ctxs {
		s := c.RDMAStats()
		st.Redrives += s.Redrives
		st.Engine.Stale += s.Engine.Stale
		st.Engine.Duplicates += s.Engine.Duplicates
	}
	if st.Redrives == 0 || st.Engine.Stale+st.Engine.Duplicates == 0 {
		t.Fatalf("seed %d: no redrive or stale packet: the faults did not bite (%+v)", seed, st)
	}
	kinds := make(map[halfKind]int)
	for _, tc := range h.cases {
		kinds[tc.kind]++
	}
	t.Logf("seed %d: %d transfers %v, %d frames replayed twice; redrives %d, stale %d, duplicates %d",
		seed, len(h.cases), kinds, len(*captured), st.Redrives, st.Engine.Stale, st.Engine.Duplicates)
}

// valueOr is k's value, or v when k is nil.
func (k *Counter) valueOr(v int64) int64 {
	if k == nil {
		return v
	}
	return k.Value()
}

// halfRun is the state of one seed of TestHalfRDMAHostile: its cases,
// and each rank's registered slots (mem), source region (src), FIFO
// handler and FIFO source.
type halfRun struct {
	t         *testing.T
	j         *simJob
	seed      uint64
	cases     []*halfCase
	mem, src  [][]byte
	pvo, spvo []hal.PVO
	recs      []*fifoRecorder
	srvs      []*fifoServer
}

// newHalfRun draws n random cases between j's ranks, each with its own
// slot where the data lands and its own source, and registers every
// rank's regions, FIFO handler and FIFO source.
func newHalfRun(t *testing.T, j *simJob, seed uint64, n int) *halfRun {
	ranks := len(j.ctxs)
	h := &halfRun{t: t, j: j, seed: seed, mem: make([][]byte, ranks), src: make([][]byte, ranks),
		pvo: make([]hal.PVO, ranks), spvo: make([]hal.PVO, ranks), recs: make([]*fifoRecorder, ranks), srvs: make([]*fifoServer, ranks)}
	rng := rand.New(rand.NewPCG(seed, 31))
	used, srcUsed := make([]int, ranks), make([]int, ranks)
	for range n {
		tc := &halfCase{kind: halfKind(rng.IntN(int(nHalfKinds))), org: rng.IntN(ranks), n: halfSize(rng)}
		tc.tgt = (tc.org + 1 + rng.IntN(ranks-1)) % ranks
		tc.none = tc.kind == hkPut || tc.kind != hkGet && tc.kind != hkGetFrom && rng.IntN(3) == 0
		at, from := tc.ends()
		tc.off = used[at] + rng.IntN(64)
		used[at] = tc.off + tc.n
		tc.soff = srcUsed[from] + rng.IntN(64)
		srcUsed[from] = tc.soff + tc.n
		h.cases = append(h.cases, tc)
	}
	for r := range ranks {
		c := j.ctxs[r]
		h.mem[r], h.src[r] = make([]byte, used[r]+64), make([]byte, srcUsed[r]+64)
		fill(h.mem[r], seed*100+uint64(r))
		fill(h.src[r], seed*200+uint64(r))
		var err error
		if h.pvo[r], err = c.TPT().Register(h.mem[r], hal.AccessRead|hal.AccessWrite); err != nil {
			t.Fatal(err)
		}
		if h.spvo[r], err = c.TPT().Register(h.src[r], hal.AccessRead); err != nil {
			t.Fatal(err)
		}
		h.recs[r], h.srvs[r] = &fifoRecorder{}, &fifoServer{mem: h.src[r]}
		if id, sid := c.Half().RegisterFIFO(h.recs[r]), c.Half().RegisterFIFOSource(h.srvs[r]); id != 0 || sid != 0 {
			t.Fatalf("first FIFO handler and source got IDs %d and %d", id, sid)
		}
	}
	return h
}

// replay injects what was captured, twice, and drains: nothing may
// change, no handler run, and every source's answers are given back.
func (h *halfRun) replay(captured []captured) {
	t, j := h.t, h.j
	snap := make([][]byte, len(h.mem))
	ncalls := make([]int, len(h.mem))
	for r := range h.mem {
		snap[r] = append([]byte(nil), h.mem[r]...)
		ncalls[r] = len(h.recs[r].calls)
	}
	for range 2 {
		for _, f := range captured {
			j.net.Inject(f.src, f.dst, f.frame)
		}
	}
	for range 200 {
		j.step()
	}
	for r := range h.mem {
		if !bytes.Equal(snap[r], h.mem[r]) || len(h.recs[r].calls) != ncalls[r] {
			t.Fatalf("seed %d: a replayed packet wrote rank %d's memory or reached its handler", h.seed, r)
		}
		if s := h.srvs[r]; s.bad || s.reads != s.released {
			t.Fatalf("seed %d: rank %d's FIFO source: %d reads, %d released, bad %v", h.seed, r, s.reads, s.released, s.bad)
		}
	}
}

// captured is an RDMA data frame seen on a simulated network.
type captured struct {
	src, dst hal.Rank
	frame    []byte
}

// captureRDMA has j's network keep one RDMA data frame in eight, for
// replay.
func captureRDMA(j *simJob, seed uint64) *[]captured {
	pick := rand.New(rand.NewPCG(seed, 8))
	var out []captured
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		if len(f) > 4 && (hal.FrameType(f[3]) == hal.FrameRDMAWrite || hal.FrameType(f[3]) == hal.FrameRDMAReadResp) &&
			len(out) < 4000 && pick.IntN(8) == 0 {
			out = append(out, captured{src, dst, append([]byte(nil), f...)})
		}
		return true
	})
	return &out
}

// startHalf starts tc: dst is its slot at the target, spvo and sdata its
// source at the origin (PutToFIFO's registered region).
func startHalf(t *testing.T, j *simJob, tc *halfCase, dst, spvo hal.PVO, sdata []byte, seed uint64) {
	t.Helper()
	c, tgt := j.ctxs[tc.org], hal.Rank(tc.tgt)
	tc.org1 = c.NewCounter()
	o := SendOpts{Completion: tc.org1, NoCompletion: tc.none}
	if tc.none {
		o.Completion, o.Origin = nil, tc.org1
	}
	if tc.kind != hkGet && tc.kind != hkGetFrom {
		tc.tgt1 = j.ctxs[tc.tgt].NewCounter()
		o.Target = tc.tgt1.ID()
	}
	var err error
	switch tc.kind {
	case hkFromFIFO, hkPut:
		tc.data = make([]byte, tc.n)
		fill(tc.data, seed)
		if tc.kind == hkPut {
			err = c.Put(tgt, dst, tc.data, o)
		} else {
			err = c.Half().PutFromFIFO(tgt, dst, tc.data, o)
		}
	case hkToFIFO:
		tc.data = append([]byte(nil), sdata...)
		err = c.Half().PutToFIFO(tgt, dst, spvo, uint64(tc.n), 0, o)
	case hkGet:
		tc.sink = &fifoSink{buf: make([]byte, tc.n), hits: make(map[uint64]int), from: tgt}
		err = c.Half().GetToFIFO(tgt, dst, uint64(tc.n), tc.sink, SendOpts{Origin: tc.org1})
	case hkGetFrom:
		tc.data = append([]byte(nil), sdata...)
		err = c.Half().GetFromFIFO(tgt, dst, uint64(tc.n), 0, uint32(tc.soff), SendOpts{Origin: tc.org1})
	}
	if err != nil {
		t.Fatalf("%v of %d B: %v", tc.kind, tc.n, err)
	}
}

// checkSink checks a read's handler got want, each offset once.
func checkSink(t *testing.T, seed uint64, i int, tc *halfCase, want []byte) {
	t.Helper()
	if tc.sink.bad || !bytes.Equal(tc.sink.buf, want) {
		t.Fatalf("seed %d: read %d (%d B from rank %d): data differs or a bad packet (%v)", seed, i, tc.n, tc.tgt, tc.sink.bad)
	}
	for off, n := range tc.sink.hits {
		if n != 1 {
			t.Fatalf("seed %d: read %d: offset %d handed up %d times", seed, i, off, n)
		}
	}
}

// checkCalls checks rank r's FIFO handler: each call addressed to the
// slot its offset names, from the case's origin, and every byte of each
// PutToFIFO slot taken exactly once.
func checkCalls(t *testing.T, seed uint64, r int, rec *fifoRecorder, cases []*halfCase, mem []byte) {
	t.Helper()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	taken := make(map[int]int) // case index: bytes
	for _, call := range rec.calls {
		if call.dstLenBad {
			t.Fatalf("seed %d rank %d: dst and data of different lengths", seed, r)
		}
		at := int(call.addr - base)
		found := false
		for i, tc := range cases {
			if tc.kind != hkToFIFO || tc.tgt != r || at < tc.off || at >= tc.off+tc.n {
				continue
			}
			if uint64(at-tc.off) != call.off || int(call.src) != tc.org {
				t.Fatalf("seed %d rank %d: case %d's packet at slot offset %d says offset %d, from %d", seed, r, i, at-tc.off, call.off, call.src)
			}
			taken[i] += int(call.n)
			found = true
		}
		if !found {
			t.Fatalf("seed %d rank %d: a FIFO packet at %d is no case's", seed, r, at)
		}
	}
	for i, tc := range cases {
		if tc.kind == hkToFIFO && tc.tgt == r && taken[i] != tc.n {
			t.Fatalf("seed %d rank %d: case %d (%d B): %d bytes went to the handler", seed, r, i, tc.n, taken[i])
		}
	}
}

// ends are the ranks of tc's slot (where the data lands) and of its
// source region.
func (tc *halfCase) ends() (at, from int) {
	if tc.kind == hkGetFrom {
		return tc.org, tc.tgt
	}
	return tc.tgt, tc.org
}

// fifoServer is a FIFOSource answering from mem, at the offset arg names,
// with a copy it counts back in.
type fifoServer struct {
	mem             []byte
	reads, released int
	bad             bool
}

func (s *fifoServer) OnRead(_ hal.Rank, arg uint32, n uint64) ([]byte, error) {
	if uint64(arg)+n > uint64(len(s.mem)) {
		return nil, errors.New("read past the source")
	}
	s.reads++
	return append([]byte{}, s.mem[arg:uint64(arg)+n]...), nil
}

func (s *fifoServer) Released(data []byte) {
	s.released++
	if s.released > s.reads {
		s.bad = true
	}
}

func (k halfKind) String() string {
	return [...]string{"PutFromFIFO", "PutToFIFO", "GetToFIFO", "Put", "GetFromFIFO"}[k]
}

// noneCounts are the frames a fire-and-forget test saw.
type noneCounts struct {
	back      int // from the targets to the origin, of any kind
	rdmaDone  int // RDMA completions and reports
	rdmaWrite int
}

// runNone runs fire-and-forget writes of every kind and size from rank 0
// to rank 1 of j (RDMA threshold 1) and checks placement, each counter
// firing once at each end, no state left at the origin, and returns the
// frames seen, which it goes on counting.
func runNone(t *testing.T, j *simJob, seed uint64) *noneCounts {
	t.Helper()
	n := new(noneCounts)
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		switch hal.FrameType(f[3]) {
		case hal.FrameRDMADone:
			n.rdmaDone++
		case hal.FrameRDMAWrite:
			n.rdmaWrite++
		}
		if src == 1 {
			n.back++
		}
		return true
	})
	org, tgt := j.ctxs[0], j.ctxs[1]
	rng := rand.New(rand.NewPCG(seed, 5))
	var cases []*halfCase
	total := 0
	for i := range 24 {
		tc := &halfCase{kind: []halfKind{hkFromFIFO, hkToFIFO, hkPut}[i%3], none: true, org: 0, tgt: 1, n: halfSize(rng), off: total}
		if i < 3 {
			tc.n = 3*rdmaChunk - 7 // several chunks, with a Target counter
		}
		total += tc.n + 1
		cases = append(cases, tc)
	}
	dst, src := make([]byte, total), make([]byte, total)
	fill(src, seed)
	dpvo, _ := tgt.TPT().Register(dst, hal.AccessWrite)
	spvo, _ := org.TPT().Register(src, hal.AccessRead)
	rec := &fifoRecorder{}
	tgt.Half().RegisterFIFO(rec)
	org.Half().RegisterFIFO(&fifoRecorder{})
	for i, tc := range cases {
		startHalf(t, j, tc, dpvo.Add(uint64(tc.off)), spvo.Add(uint64(tc.off)), src[tc.off:tc.off+tc.n], seed*1000+uint64(i))
	}
	j.run(time.Minute, nil, func() bool {
		for _, tc := range cases {
			if tc.org1.Value() < 1 || tc.tgt1.Value() < 1 {
				return false
			}
		}
		return true
	})
	for range 100 {
		j.step()
	}
	for i, tc := range cases {
		if !bytes.Equal(dst[tc.off:tc.off+tc.n], tc.data) {
			t.Fatalf("%v %d (%d B) differs", tc.kind, i, tc.n)
		}
		if tc.org1.Value() != 1 || tc.tgt1.Value() != 1 {
			t.Fatalf("%v %d: counters %d at the origin, %d at the target, want 1", tc.kind, i, tc.org1.Value(), tc.tgt1.Value())
		}
	}
	checkCalls(t, seed, 1, rec, cases, dst)
	org.mu.Lock()
	defer org.mu.Unlock()
	if r := &org.rd; r.groups != 0 || len(r.sentNone) != 0 || len(r.queue) != 0 || r.pool.InUse() != 0 {
		t.Fatalf("the origin keeps state: %d transfers, %d sent, %d queued, %d rCxts", r.groups, len(r.sentNone), len(r.queue), r.pool.InUse())
	}
	return n
}

// TestNoCompletionReliable: over a reliable device, fire-and-forget
// Puts, half-receive and half-send writes of 0 B to 3 MiB go as RDMA
// packets and nothing at all comes back from the target, while the same
// writes asking for completion are answered.
func TestNoCompletionReliable(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		j := newRDMAJobCfg(t, 2, faults.Spec{Seed: seed}, func(c *Config) { c.Device = nodeDevice{c.Device} })
		n := runNone(t, j, seed)
		if n.back != 0 || n.rdmaDone != 0 || n.rdmaWrite == 0 {
			t.Fatalf("seed %d: %d frames back (%d RDMA completions), %d RDMA writes", seed, n.back, n.rdmaDone, n.rdmaWrite)
		}
		// The contrast: a Put asking for completion is answered.
		dst := make([]byte, 5000)
		p, _ := j.ctxs[1].TPT().Register(dst, hal.AccessWrite)
		putOnce(t, j, make([]byte, 5000), dst, p)
		if n.rdmaDone == 0 || n.back == 0 {
			t.Fatal("a Put asking for completion was not answered: the count sees nothing")
		}
		j.close()
	}
}

// TestNoCompletionHostile: over the hostile network fire-and-forget
// writes go as lapi's sequenced packets: no RDMA completion crosses and
// the target sends the origin no message, only link acknowledgements;
// every byte lands once and the origin keeps no state.
func TestNoCompletionHostile(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		spec := hostile
		spec.Seed = seed
		j := newRDMAJob(t, 2, spec)
		n := runNone(t, j, seed)
		st := j.ctxs[1].PeerStats()[0]
		if n.rdmaDone != 0 || n.rdmaWrite != 0 || st.MessagesSent != 0 || n.back == 0 {
			t.Fatalf("seed %d: %d RDMA completions, %d RDMA writes, %d messages and %d frames back", seed, n.rdmaDone, n.rdmaWrite, st.MessagesSent, n.back)
		}
		if j.ctxs[0].Stats().Retransmits == 0 {
			t.Fatalf("seed %d: nothing retransmitted: the faults did not bite", seed)
		}
		j.close()
	}
}

// TestNoCompletionAccumulate: a fire-and-forget Accumulate reduces
// exactly once over the reliable device (RDMA packets, no completion) and
// over the hostile network (lapi's packets).
func TestNoCompletionAccumulate(t *testing.T) {
	for _, reliable := range []bool{true, false} {
		spec := hostile
		spec.Seed = 3
		var mod func(*Config)
		if reliable {
			spec = faults.Spec{}
			mod = func(c *Config) { c.Device = nodeDevice{c.Device} }
		}
		j := newRDMAJobCfg(t, 2, spec, mod)
		const n = 50_001
		dst := make([]int32, n)
		region, _ := j.ctxs[1].TPT().Register(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*n), hal.AccessWrite)
		src := make([]int32, n)
		for i := range src {
			src[i] = int32(i)
		}
		org, tk := j.ctxs[0].NewCounter(), j.ctxs[1].NewCounter()
		done := 0
		j.net.SetFilter(func(_, _ hal.Rank, f []byte) bool {
			if hal.FrameType(f[3]) == hal.FrameRDMADone {
				done++
			}
			return true
		})
		for range 3 {
			err := j.ctxs[0].Accumulate(1, region, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*n), AccSum, Int32,
				SendOpts{Origin: org, Target: tk.ID(), NoCompletion: true})
			if err != nil {
				t.Fatal(err)
			}
		}
		j.run(time.Minute, nil, func() bool { return tk.Value() >= 3 && org.Value() >= 3 })
		for i, v := range dst {
			if v != 3*int32(i) {
				t.Fatalf("reliable %v: element %d = %d, want %d", reliable, i, v, 3*i)
			}
		}
		if done != 0 {
			t.Fatalf("reliable %v: %d RDMA completions crossed", reliable, done)
		}
		j.close()
	}
}

// TestNoCompletionErrors: contradictory options are refused, and a write
// the target refuses is counted there, fails the target's counter, and
// sends nothing back.
func TestNoCompletionErrors(t *testing.T) {
	j := newRDMAJobCfg(t, 2, faults.Spec{}, func(c *Config) { c.Device = nodeDevice{c.Device} })
	defer j.close()
	org, tgt := j.ctxs[0], j.ctxs[1]
	k := org.NewCounter()
	buf := make([]byte, 100)
	if err := org.Put(1, hal.PVO{}, buf, SendOpts{Completion: k, NoCompletion: true}); !errors.Is(err, ErrBadOpts) {
		t.Fatalf("Put with a Completion counter and none: %v", err)
	}
	if err := org.Half().GetToFIFO(1, hal.PVO{}, 10, &fifoSink{}, SendOpts{NoCompletion: true}); !errors.Is(err, ErrBadOpts) {
		t.Fatalf("a read with none: %v", err)
	}
	// A Get's or Rmw's data lands here: Completion and Target counters,
	// which they never incremented (a wait on one never ended), are
	// refused.
	var prev int64
	for what, err := range map[string]error{
		"Get with Completion":     org.Get(1, hal.PVO{}, buf, SendOpts{Completion: k}),
		"Get with Target":         org.Get(1, hal.PVO{}, buf, SendOpts{Target: 1}),
		"GetWhen with Completion": org.GetWhen(k, 1, 1, hal.PVO{}, buf, SendOpts{Completion: k}),
		"Rmw with Completion":     org.Rmw(1, FetchAndAdd, hal.PVO{}, 1, 0, &prev, SendOpts{Completion: k}),
		"Rmw with Target":         org.Rmw(1, FetchAndAdd, hal.PVO{}, 1, 0, &prev, SendOpts{Target: 1}),
	} {
		if !errors.Is(err, ErrBadOpts) {
			t.Errorf("%s: %v, want ErrBadOpts", what, err)
		}
	}
	if err := org.Half().GetToFIFO(5, hal.PVO{}, 10, &fifoSink{}, SendOpts{}); !errors.Is(err, ErrBadRank) {
		t.Fatalf("a read from no rank: %v", err)
	}
	if err := org.Half().PutToFIFO(1, hal.PVO{}, hal.PVO{}, 10, 0, SendOpts{}); !errors.Is(err, hal.ErrProtection) {
		t.Fatalf("a half-send write of an unregistered region: %v", err)
	}
	ro := make([]byte, 100)
	p, _ := tgt.TPT().Register(ro, hal.AccessRead) // no writes
	tk := tgt.NewCounter()
	back := 0
	j.net.SetFilter(func(src, _ hal.Rank, _ []byte) bool {
		if src == 1 {
			back++
		}
		return true
	})
	if err := org.Half().PutFromFIFO(1, p, buf, SendOpts{Origin: k, Target: tk.ID(), NoCompletion: true}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return tk.Value() >= 1 && k.Value() >= 1 })
	if err := tk.Wait(context.Background(), 1); !errors.Is(err, ErrProtection) && !errors.Is(err, hal.ErrProtection) {
		t.Fatalf("the target's counter: %v", err)
	}
	if tgt.RDMAStats().Faults != 1 || back != 0 || !bytes.Equal(ro, make([]byte, 100)) {
		t.Fatalf("refused write: %d faults counted, %d frames back, memory touched %v", tgt.RDMAStats().Faults, back, !bytes.Equal(ro, make([]byte, 100)))
	}
}

// TestHalfRDMAAllocs: once warm, a fire-and-forget Put and each
// half-RDMA transfer (whole, both ends) allocate nothing.
func TestHalfRDMAAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts: this runs without -race (go test ./lapi)")
	}
	ctxs := openInprocJob(t, 2, faults.Spec{}, rdmaEngine, func(c *Config) { c.Spin = time.Hour })
	c0, c1 := ctxs[0], ctxs[1]
	mem := make([]byte, 3<<20)
	region, _ := c1.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	src := make([]byte, 3<<20) // three chunks
	local, _ := c0.TPT().Register(src, hal.AccessRead)
	id := c1.Half().RegisterFIFO(&nopFIFO{})
	c0.Half().RegisterFIFO(&nopFIFO{})
	defer serving(c1)()
	k, tk := c0.NewCounter(), c1.NewCounter()
	ctx := context.Background()
	sink := &nopFIFO{}
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		// A fire-and-forget sender may run ahead of its receiver by the
		// device's queue, whose frame pool would grow meanwhile: each
		// transfer waits for its target counter (a chunk's worth: one
		// RDMA transfer).
		{"put none", func() error {
			return c0.Put(1, region, src[:rdmaChunk], SendOpts{Origin: k, Target: tk.ID(), NoCompletion: true})
		}},
		{"put from FIFO", func() error {
			return c0.Half().PutFromFIFO(1, region, src, SendOpts{Completion: k, Target: tk.ID()})
		}},
		{"put to FIFO", func() error {
			return c0.Half().PutToFIFO(1, region, local, uint64(len(src)), id, SendOpts{Completion: k, Target: tk.ID()})
		}},
		{"get to FIFO", func() error {
			tk.incr() // no target counter for a read
			return c0.Half().GetToFIFO(1, region, uint64(len(src)), sink, SendOpts{Origin: k})
		}},
	} {
		run := func() {
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			if err := k.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := tk.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		for range 100 {
			run()
		}
		if n := testing.AllocsPerRun(50, run); n > 0.1 {
			t.Errorf("%s: %v allocations per transfer", tc.name, n)
		}
	}
}

// nopFIFO takes packets and does nothing with them.
type nopFIFO struct{ n int }

func (f *nopFIFO) OnFIFO(hal.Rank, uint64, []byte, []byte) { f.n++ }

// FuzzFIFOArg: whatever arg word, offset and uhdr a peer sends a
// half-send write, the target neither panics nor hands a packet to a
// handler it did not register, and a registered handler gets the offset
// the word's chunk index and the packet's offset name.
func FuzzFIFOArg(f *testing.F) {
	f.Add(uint32(fifoArgBit|3<<fifoChunkShift), uint64(4096), []byte("data"), make([]byte, hal.PVOLen+4))
	f.Add(accArg(AccSum, Int32), uint64(0), make([]byte, 8), []byte{1, 2})
	f.Add(uint32(fifoArgBit|1), uint64(0), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, arg uint32, off uint64, data, uhdr []byte) {
		j := newRDMAJob(t, 2, faults.Spec{})
		defer j.close()
		c := j.ctxs[1]
		var got []uint64
		c.Half().RegisterFIFO(fifoFunc(func(_ hal.Rank, o uint64, _, _ []byte) { got = append(got, o) }))
		dst := make([]byte, len(data))
		place, err := c.TPT().Register(dst, hal.AccessWrite)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.rd.fifoPacket(0, arg, off, dst, place, data)
		h := fifoAMHandler{c}
		buf, cookie := h.OnHeader(0, uhdr, len(data))
		c.mu.Unlock()
		if cookie != nil {
			copy(buf, data)
			h.OnComplete(0, cookie)
		}
		id := arg & (1<<fifoChunkShift - 1)
		switch {
		case arg&fifoArgBit == 0 || id != 0 || len(data) == 0:
			if len(got) != 0 {
				t.Fatalf("arg %#x: handler 0 got a packet", arg)
			}
		case len(got) != 1 || got[0] != uint64(arg&^fifoArgBit)>>fifoChunkShift*rdmaChunk+off:
			t.Fatalf("arg %#x offset %d: handler got %v", arg, off, got)
		}
	})
}

// fifoFunc is a FIFOHandler of a function.
type fifoFunc func(src hal.Rank, off uint64, dst, data []byte)

func (f fifoFunc) OnFIFO(src hal.Rank, off uint64, dst, data []byte) { f(src, off, dst, data) }

// TestGetFromFIFORefused: a half-receive read that its target's source
// refuses, that names no source, or whose answer this rank's TPT refuses,
// fails the origin's counter once with ErrProtection and writes nothing.
func TestGetFromFIFORefused(t *testing.T) {
	j := newRDMAJob(t, 2, hostile)
	defer j.close()
	org, tgt := j.ctxs[0], j.ctxs[1]
	srv := &fifoServer{mem: make([]byte, 1000)}
	tgt.Half().RegisterFIFOSource(srv)
	dst := make([]byte, 5000)
	rw, _ := org.TPT().Register(dst, hal.AccessWrite)
	ro, _ := org.TPT().Register(make([]byte, 5000), hal.AccessRead)
	for _, tc := range []struct {
		name string
		dst  hal.PVO
		n    uint64
		src  FIFOID
	}{
		{"refused by the source", rw, 5000, 0}, // past its 1000 bytes
		{"no such source", rw, 10, 3},
		{"the origin's region refuses writes", ro, 900, 0},
	} {
		k := org.NewCounter()
		if err := org.Half().GetFromFIFO(1, tc.dst, tc.n, tc.src, 0, SendOpts{Origin: k}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return k.Value() >= 1 })
		for range 50 {
			j.step()
		}
		if err := k.Wait(context.Background(), 1); !errors.Is(err, ErrProtection) && !errors.Is(err, hal.ErrProtection) || k.Value() != 1 {
			t.Fatalf("%s: %v, counter at %d (want 1)", tc.name, err, k.Value())
		}
	}
	if !bytes.Equal(dst, make([]byte, 5000)) || srv.reads != srv.released {
		t.Fatalf("memory written, or the source's answers not all released (%d reads, %d released)", srv.reads, srv.released)
	}
	if err := org.Half().GetFromFIFO(1, rw, 10, 0, 0, SendOpts{NoCompletion: true}); !errors.Is(err, ErrBadOpts) {
		t.Fatalf("a read with none: %v", err)
	}
}

// BenchmarkNoCompletion moves size bytes from rank 0 into a region of
// rank 1 by Put, up to 8 transfers in flight, each asking for its
// completion or fire-and-forget (NoCompletion): MB/s is goodput, counted
// when the target has the data (its Target counter).
func BenchmarkNoCompletion(b *testing.B) {
	for _, j := range rdmaBenchJobs[1:3] { // inproc-engine, udp
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
			for _, none := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/none=%v/%dKiB", j.name, none, size>>10), func(b *testing.B) {
					benchNone(b, j.open(b), size, none)
				})
			}
		}
	}
}

func benchNone(b *testing.B, ctxs []*Context, size int, none bool) {
	c0, c1 := ctxs[0], ctxs[1]
	region, err := c1.TPT().Register(make([]byte, size), hal.AccessWrite)
	if err != nil {
		b.Fatal(err)
	}
	// The goroutine waits at the target: the origin needs progress of
	// its own, to hear completions and push what the device had no room
	// for.
	defer serving(c1)()
	defer serving(c0)()
	src := make([]byte, size)
	done, tk := c0.NewCounter(), c1.NewCounter()
	o := SendOpts{Completion: done, Target: tk.ID()}
	if none {
		o = SendOpts{Target: tk.ID(), NoCompletion: true}
	}
	ctx := context.Background()
	const window = 8
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i >= window {
			if err := tk.Wait(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
		if err := c0.Put(1, region, src, o); err != nil {
			b.Fatal(err)
		}
	}
	if err := tk.Wait(ctx, int64(min(b.N, window))); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}

// TestRegisterNil: a nil handler, FIFO or FIFO source is not registered:
// its registration returns NoHandler or NoFIFO, and a send naming it fails
// at the origin with ErrNoHandler. (A nil one registered used to take an
// ID, and the target dropped what came for it after acknowledging it, so
// the origin's counters fired on data gone nowhere, and a rendezvous
// origin waited for a FIN that never came.)
func TestRegisterNil(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{})
	defer j.close()
	org, tgt := j.ctxs[0], j.ctxs[1]
	for _, c := range j.ctxs {
		if id := c.RegisterHandler(nil); id != NoHandler {
			t.Fatalf("RegisterHandler(nil) = %d, want NoHandler", id)
		}
		if id := c.Half().RegisterFIFO(nil); id != NoFIFO {
			t.Fatalf("RegisterFIFO(nil) = %d, want NoFIFO", id)
		}
		if id := c.Half().RegisterFIFOSource(nil); id != NoFIFO {
			t.Fatalf("RegisterFIFOSource(nil) = %d, want NoFIFO", id)
		}
	}
	// The next registrations take the IDs a nil one would have taken.
	h, f := org.RegisterHandler(nopHandler{}), org.Half().RegisterFIFO(&nopFIFO{})
	if h2, f2 := tgt.RegisterHandler(nopHandler{}), tgt.Half().RegisterFIFO(&nopFIFO{}); h != h2 || f != f2 {
		t.Fatalf("the ranks' IDs differ: handler %d and %d, FIFO %d and %d", h, h2, f, f2)
	}
	dpvo, _ := tgt.TPT().Register(make([]byte, 3000), hal.AccessWrite)
	spvo, _ := org.TPT().Register(make([]byte, 3000), hal.AccessRead)
	k := org.NewCounter()
	if err := org.Half().PutToFIFO(1, dpvo, spvo, 3000, tgt.Half().RegisterFIFO(nil), SendOpts{Origin: k}); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("PutToFIFO to a nil FIFO: %v, want ErrNoHandler", err)
	}
	if err := org.Amsend(1, org.RegisterHandler(nil), nil, make([]byte, 1<<20), SendOpts{Origin: k}); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("Amsend of 1 MiB to a nil handler: %v, want ErrNoHandler", err)
	}
	if k.Value() != 0 {
		t.Fatalf("the origin counter fired %d times for sends that failed", k.Value())
	}
}

// TestAccumulateNotAfterDeregister: an Accumulate's packet the engine
// handed up (EvFIFO) for a region deregistered before the driver reduced
// it reduces nothing: the owner's memory is its own once Deregister has
// returned (lapi's Deregister takes no progress lock, so it can come
// between the engine's check and the reduction).
func TestAccumulateNotAfterDeregister(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{})
	defer j.close()
	c := j.ctxs[1]
	mem := make([]byte, 8)
	place, err := c.TPT().Register(mem, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8)
	binary.LittleEndian.PutUint64(data, 5)
	ev := hal.RDMAEvent{Kind: hal.EvFIFO, Peer: 0, Arg: accArg(AccSum, Int64), Dst: mem, Place: place, Data: data}
	if err := c.Deregister(place); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(mem, 7) // the owner's again
	faults := c.rd.stats.Faults
	c.mu.Lock()
	c.rd.rdmaEvent(&ev)
	c.mu.Unlock()
	if v := binary.LittleEndian.Uint64(mem); v != 7 {
		t.Fatalf("the region holds %d after Deregister returned, want the owner's 7: the Accumulate reduced into it", v)
	}
	if c.rd.stats.Faults != faults+1 {
		t.Errorf("faults %d, want %d: the packet for a gone region is counted", c.rd.stats.Faults, faults+1)
	}
	// A region still registered is reduced into as before.
	place, _ = c.TPT().Register(mem, hal.AccessWrite)
	ev.Place = place
	c.mu.Lock()
	c.rd.rdmaEvent(&ev)
	c.mu.Unlock()
	if v := binary.LittleEndian.Uint64(mem); v != 12 {
		t.Fatalf("the region holds %d, want 7+5", v)
	}
}

// TestIDSpaceExhausted registers handlers, FIFOs and FIFO sources until
// their 16-bit ID spaces are used up: each registration past the last ID
// returns NoHandler or NoFIFO (an ID that wrapped around would name
// lapi's own handler 0, or FIFO 0, and deliver there), and a send naming
// one fails with ErrNoHandler instead of going anywhere.
func TestIDSpaceExhausted(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{})
	defer j.close()
	c := j.ctxs[0]
	seen := map[HandlerID]bool{}
	for {
		id := c.RegisterHandler(nopHandler{})
		if id == NoHandler {
			break
		}
		if seen[id] {
			t.Fatalf("handler ID %d returned twice", id)
		}
		seen[id] = true
	}
	if id := c.RegisterHandler(nopHandler{}); id != NoHandler {
		t.Fatalf("a registration after the last ID returned %d, want NoHandler", id)
	}
	if err := c.Amsend(1, NoHandler, nil, []byte{1}, SendOpts{}); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("Amsend to NoHandler: %v, want ErrNoHandler", err)
	}
	fifos, sources := 0, 0
	for c.Half().RegisterFIFO(&nopFIFO{}) != NoFIFO {
		fifos++
	}
	for c.Half().RegisterFIFOSource(&bufSource{}) != NoFIFO {
		sources++
	}
	if fifos != int(NoFIFO) || sources != int(NoFIFO) {
		t.Fatalf("%d FIFOs and %d sources registered, want %d each", fifos, sources, NoFIFO)
	}
	// One more of each: an ID that wrapped around would be 0.
	if id, sid := c.Half().RegisterFIFO(&nopFIFO{}), c.Half().RegisterFIFOSource(&bufSource{}); id != NoFIFO || sid != NoFIFO {
		t.Fatalf("registrations past the last ID returned %d and %d, want NoFIFO", id, sid)
	}
	pvo, _ := c.TPT().Register(make([]byte, 64), hal.AccessRead|hal.AccessWrite)
	if err := c.Half().PutToFIFO(1, pvo, pvo, 64, NoFIFO, SendOpts{}); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("PutToFIFO to NoFIFO: %v, want ErrNoHandler", err)
	}
	if err := c.Half().GetFromFIFO(1, pvo, 64, NoFIFO, 0, SendOpts{}); !errors.Is(err, ErrNoHandler) {
		t.Fatalf("GetFromFIFO from NoFIFO: %v, want ErrNoHandler", err)
	}
}

// bufSource answers every read with the same buffer.
type bufSource struct{ buf []byte }

func (s *bufSource) OnRead(_ hal.Rank, _ uint32, n uint64) ([]byte, error) { return s.buf[:n], nil }
func (s *bufSource) Released([]byte)                                       {}

// TestFireAndForgetAllocs: once warm, the transfers that go as lapi's own
// active messages over an unreliable device allocate nothing at either
// end: a fire-and-forget PutToFIFO of one packet and of several (its
// target takes the data whole, or gathers it in a buffer of its own), and
// a GetFromFIFO (its target asks its source and writes the answer).
func TestFireAndForgetAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts: this runs without -race (go test ./lapi)")
	}
	unreliable := func(c *Config) { c.Device = faults.Wrap(c.Device, faults.Spec{}, time.Now) }
	ctxs := openInprocJob(t, 2, faults.Spec{}, rdmaEngine, unreliable, func(c *Config) { c.Spin = time.Hour })
	c0, c1 := ctxs[0], ctxs[1]
	if c0.Reliable() {
		t.Fatal("the wrapped device is reliable: the test needs lapi's own packets")
	}
	const big = 200 << 10 // several packets
	mem := make([]byte, big)
	region, _ := c1.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	src := make([]byte, big)
	local, _ := c0.TPT().Register(src, hal.AccessRead|hal.AccessWrite)
	id := c1.Half().RegisterFIFO(&nopFIFO{})
	c0.Half().RegisterFIFO(&nopFIFO{})
	sid := c1.Half().RegisterFIFOSource(&bufSource{buf: make([]byte, big)})
	c0.Half().RegisterFIFOSource(&bufSource{})
	defer serving(c1)()
	k, tk := c0.NewCounter(), c1.NewCounter()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		op   func() error
		wait *Counter
	}{
		{"put to FIFO, one packet", func() error {
			return c0.Half().PutToFIFO(1, region, local, 64, id, SendOpts{NoCompletion: true, Target: tk.ID()})
		}, tk},
		{"put to FIFO, several packets", func() error {
			return c0.Half().PutToFIFO(1, region, local, big, id, SendOpts{NoCompletion: true, Target: tk.ID()})
		}, tk},
		{"get from FIFO", func() error {
			return c0.Half().GetFromFIFO(1, local, big, sid, 7, SendOpts{Origin: k})
		}, k},
	} {
		run := func() {
			if err := tc.op(); err != nil {
				t.Fatal(err)
			}
			if err := tc.wait.Wait(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		// Long: the packet pool grows to what a fire-and-forget stream
		// leaves waiting for acknowledgement.
		for range 2000 {
			run()
		}
		if n := testing.AllocsPerRun(50, run); n > 0.1 {
			t.Errorf("%s: %v allocations per transfer", tc.name, n)
		}
	}
}
