package lapi

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
	"github.com/weft-hpc/weft/stripe"
)

// gapRecorder is an AM handler that records when each message arrived.
type gapRecorder struct {
	now  func() time.Time
	seen map[uint32]bool
	at   []time.Time
}

func (g *gapRecorder) OnHeader(_ hal.Rank, uhdr []byte, n int) ([]byte, any) {
	return make([]byte, n), binary.LittleEndian.Uint32(uhdr)
}

func (g *gapRecorder) OnComplete(_ hal.Rank, cookie any) {
	id := cookie.(uint32)
	if !g.seen[id] {
		g.seen[id] = true
		g.at = append(g.at, g.now())
	}
}

// stripeStall streams msgs 4 KiB messages from rank 0 to rank 1 over
// stripes of two simulated networks, cuts the second network at rank 0
// after cutAfter messages have arrived, and returns the longest gap
// between two arrivals after the cut. resend says whether lapi resends
// what is in flight when the stripe takes a member out.
func stripeStall(t *testing.T, resend bool, msgs, cutAfter int) (time.Duration, uint64) {
	a, err := simnet.New(2, faults.Spec{Seed: 1}, simnet.WithLatency(50*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	b, err := simnet.New(2, faults.Spec{Seed: 2}, simnet.WithLatency(50*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	j := &simJob{t: t, net: a, node: b}
	var devs []*stripe.Device
	for r := range 2 {
		s, err := stripe.New([]hal.Device{a.Device(hal.Rank(r)), b.Device(hal.Rank(r))}, stripe.Options{
			Rank: hal.Rank(r), JobKey: simnet.DefaultJobKey, Now: a.Now,
			Silence: 20 * time.Millisecond, Probe: 5 * time.Millisecond, SilenceFrames: 8})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, s)
	}
	for r, s := range devs {
		if err := s.Connect(hal.Rank(1-r), devs[1-r].Addr()); err != nil {
			t.Fatal(err)
		}
		c, err := Open(Config{Device: s, Rank: hal.Rank(r), Size: 2, JobKey: simnet.DefaultJobKey,
			Clock: a.Now, PeerTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if !resend {
			c.failover = nil
		}
		j.ctxs = append(j.ctxs, c)
	}
	defer j.close()
	rec := &gapRecorder{now: a.Now, seen: map[uint32]bool{}}
	h := j.ctxs[1].RegisterHandler(rec)
	j.ctxs[0].RegisterHandler(&gapRecorder{})
	origin := j.ctxs[0].NewCounter()
	sent, cut := 0, false
	var cutAt time.Time
	j.run(time.Minute, func() {
		for sent < msgs && int64(sent)-origin.Value() < 64 {
			var u [4]byte
			binary.LittleEndian.PutUint32(u[:], uint32(sent))
			if err := j.ctxs[0].Amsend(1, h, u[:], pattern[:4096], SendOpts{Origin: origin}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		if !cut && len(rec.at) >= cutAfter {
			cut, cutAt = true, a.Now()
			b.Isolate(0) // rank 0's second NIC: nothing in or out
		}
	}, func() bool { return len(rec.at) == msgs })
	var worst time.Duration
	prev := cutAt
	for _, at := range rec.at {
		if at.After(cutAt) {
			worst = max(worst, at.Sub(prev))
			prev = at
		}
	}
	return worst, j.ctxs[0].Stats().FailoverResends
}

// TestFailoverResend: when a stripe takes a member out, lapi resends what
// it had in flight at once, with its back-off reset, instead of waiting
// for its timers: the longest stall of a stream across a NIC's failure is
// the stripe's detection time and a round trip, well under what the
// timers alone take.
func TestFailoverResend(t *testing.T) {
	with, n := stripeStall(t, true, 3000, 1000)
	without, _ := stripeStall(t, false, 3000, 1000)
	t.Logf("longest stall after the cut: %v with the resend (%d resends), %v without", with, n, without)
	if n == 0 {
		t.Fatal("no failover resend: the stripe never took the member out, or lapi did not see it")
	}
	if with >= without {
		t.Errorf("stall %v with the resend, %v without: the resend does not help", with, without)
	}
	// Silence (20 ms) takes the member out; then one round trip (0.1 ms).
	if with > 25*time.Millisecond {
		t.Errorf("stall %v with the resend: want within the stripe's 20 ms detection and a round trip", with)
	}
}

// TestRDMAWindow: toward a peer over a lossy device, a chunk's first
// redrive halves the bytes RDMA may have in flight there (never below one
// chunk), and chunks completed at their first drive open it again up to
// RDMAWindow; toward a reliable device nothing changes it.
func TestRDMAWindow(t *testing.T) {
	spec := hostile
	spec.Seed = 4
	j := newSimJob(t, 2, spec, simnet.WithMTU(16<<10))
	defer j.close()
	c0, c1 := j.ctxs[0], j.ctxs[1]
	dst := make([]byte, 4<<20)
	pvo, _ := c1.TPT().Register(dst, hal.AccessWrite)
	put := func() {
		k := c0.NewCounter()
		if err := c0.Put(1, pvo, pattern[:len(dst)/2], SendOpts{Completion: k}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return settled(k, 1) })
		if k.err != nil {
			t.Fatal(k.err)
		}
	}
	full := c0.cfg.RDMAWindow
	for range 4 {
		put()
	}
	cuts := c0.RDMAStats().WindowCuts
	c0.mu.Lock()
	w := c0.rd.cwnd[1]
	c0.mu.Unlock()
	if cuts == 0 || w >= full || w < rdmaChunk {
		t.Fatalf("after lossy puts: %d cuts, window %d of %d: want cuts and a window in [%d, %d)", cuts, w, full, rdmaChunk, full)
	}
	t.Logf("after 4 lossy 2 MiB puts: %d window cuts, window %d KiB", cuts, w>>10)

	// Growth: a window's worth of clean chunk completions opens it by
	// about a chunk; enough of them bring it back to RDMAWindow, and
	// shrinking never goes below a chunk.
	c0.mu.Lock()
	defer c0.mu.Unlock()
	c0.rd.cwnd[1] = 2 * rdmaChunk
	c0.rd.grow(1, rdmaChunk)
	c0.rd.grow(1, rdmaChunk)
	if got := c0.rd.cwnd[1]; got <= 2*rdmaChunk || got > 3*rdmaChunk {
		t.Errorf("two clean chunks on a window of two: %d, want within (2, 3] chunks", got)
	}
	for range 1000 {
		c0.rd.grow(1, rdmaChunk)
	}
	if got := c0.rd.cwnd[1]; got != full {
		t.Errorf("after 1000 clean chunks: window %d, want RDMAWindow %d", got, full)
	}
	for range 20 {
		c0.rd.shrink(1)
	}
	if got := c0.rd.cwnd[1]; got != rdmaChunk {
		t.Errorf("after 20 losses: window %d, want one chunk %d", got, rdmaChunk)
	}
}
