package lapi

import (
	"bytes"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// TestRDMAWindowCutStaysWithinConfig: Config.RDMAWindow "over an
// unreliable device ... is the most a congestion window allows: halved by
// a loss". With RDMAWindow below a chunk (256 KiB), a loss must leave the
// window at or below 256 KiB, not raise it to a whole 1 MiB chunk.
func TestRDMAWindowCutStaysWithinConfig(t *testing.T) {
	const window = 256 << 10
	j := newRDMAJobCfg(t, 2, faults.Spec{Seed: 1}, func(c *Config) { c.RDMAWindow = window })
	defer j.close()
	c0, c1 := j.ctxs[0], j.ctxs[1]
	if c0.reliable {
		t.Fatal("simnet is reliable: no congestion window")
	}
	remote := make([]byte, 128<<10)
	p, err := c1.TPT().Register(remote, hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	// One data packet of the first Put is lost: the target reports it
	// missing and the origin cuts its window.
	dropped := false
	j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
		if !dropped && src == 0 && hal.FrameType(f[3]) == hal.FrameRDMAWrite {
			dropped = true
			return false
		}
		return true
	})
	if w := c0.Snapshot().Peers[1].RDMAWindow; w != window {
		t.Fatalf("window before any loss: %d, want %d", w, window)
	}
	src := make([]byte, len(remote))
	fill(src, 7)
	k := c0.NewCounter()
	if err := c0.Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	if !j.runFor(time.Minute, func() bool { return settled(k, 1) }) || k.err != nil {
		t.Fatalf("put: %d %v", k.Value(), k.err)
	}
	if !bytes.Equal(remote, src) {
		t.Fatal("put: data differs")
	}
	s := c0.RDMAStats()
	if !dropped || s.WindowCuts == 0 {
		t.Fatalf("no loss acted on: dropped %v, stats %+v", dropped, s)
	}
	if w := c0.Snapshot().Peers[1].RDMAWindow; w > window {
		t.Errorf("after %d window cut(s) the window toward rank 1 is %d bytes, above RDMAWindow %d (halved, it should be at most %d)",
			s.WindowCuts, w, window, window/2)
	}
}

// fifoCount is a PutToFIFO handler that counts the bytes it was handed.
type fifoCount struct{ n int }

func (f *fifoCount) OnFIFO(_ hal.Rank, _ uint64, _, data []byte) { f.n += len(data) }

// TestRDMAStatsCountPutToFIFO: RDMAStats.Writes, Reads and Accumulates
// count the "transfers originated". GetToFIFO (a half-send read) counts
// as a read and PutFromFIFO as a write; PutToFIFO, the half-send write,
// must count as a write too, not go uncounted.
func TestRDMAStatsCountPutToFIFO(t *testing.T) {
	j := newRDMAJob(t, 2, faults.Spec{Seed: 1})
	defer j.close()
	c0, c1 := j.ctxs[0], j.ctxs[1]
	recs := []*fifoCount{{}, {}}
	var id FIFOID
	for r, c := range j.ctxs {
		id = c.Half().RegisterFIFO(recs[r])
	}
	src := make([]byte, 64<<10)
	fill(src, 3)
	spvo, err := c0.TPT().Register(src, hal.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	dpvo, err := c1.TPT().Register(make([]byte, len(src)), hal.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	before := c0.RDMAStats()
	k := c0.NewCounter()
	if err := c0.Half().PutToFIFO(1, dpvo, spvo, uint64(len(src)), id, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	c0.mu.Lock()
	byRDMA := c0.rd.groups == 1
	c0.mu.Unlock()
	if !byRDMA {
		t.Fatal("the PutToFIFO did not go by RDMA")
	}
	if !j.runFor(time.Minute, func() bool { return settled(k, 1) }) || k.err != nil {
		t.Fatalf("PutToFIFO: %d %v", k.Value(), k.err)
	}
	if recs[1].n != len(src) {
		t.Fatalf("the target's handler got %d bytes of %d", recs[1].n, len(src))
	}
	s := c0.RDMAStats()
	if got := s.Writes + s.Reads + s.Accumulates - before.Writes - before.Reads - before.Accumulates; got != 1 {
		t.Errorf("one PutToFIFO by RDMA counted as %d transfers originated (Writes %d, Reads %d, Accumulates %d), want 1 write",
			got, s.Writes-before.Writes, s.Reads-before.Reads, s.Accumulates-before.Accumulates)
	}
}
