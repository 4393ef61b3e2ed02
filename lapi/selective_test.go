package lapi

import (
	"bytes"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// frameCount counts the frames a simulated network carries, by kind.
type frameCount struct {
	writes  int // RDMA write data frames, every drive
	redrive int // of them, frames of a drive after the first
	other   int // everything else: completions, reports, link packets
}

// putOnce puts src into rank 1's dst from rank 0 of j and runs the job
// until the Put completes, checking the data.
func putOnce(t *testing.T, j *simJob, src, dst []byte, p hal.PVO) {
	t.Helper()
	k := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return k.Value() >= 1 })
	if k.err != nil {
		t.Fatal(k.err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("the target's memory differs from the data put")
	}
}

// rdmaHdrOf decodes an RDMA frame's header; ok false for other frames.
func rdmaHdrOf(f []byte) (h hal.RDMAHdr, ok bool) {
	if len(f) < hal.HeaderLen || !hal.IsRDMAFrame(hal.FrameType(f[3])) {
		return h, false
	}
	return h, hal.DecodeRDMA(hal.FrameType(f[3]), f[hal.HeaderLen:], &h) == nil
}

// TestRDMASelectiveRedrive: a 1 MiB Put (one chunk of 745 packets at
// MTU 1500) that loses a few packets of its first drive is repaired by
// resending exactly those: the target's report comes at the drive's last
// packet, no timer runs out, and the frames resent are the frames lost.
// When the drive's last packet is lost too, the origin's timer probes
// with it alone, and the report answering the probe names the rest.
func TestRDMASelectiveRedrive(t *testing.T) {
	const n = 1 << 20
	for _, tc := range []struct {
		name   string
		lose   []uint64 // segments of the first drive lost
		tail   bool     // the last segment is lost too
		probes uint64
	}{
		{"middle", []uint64{5, 100, 101, 400, 743}, false, 0},
		{"tail", []uint64{3, 64}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newRDMAJobCfg(t, 2, faults.Spec{Seed: 1}, nil, simnet.WithMTU(1500))
			defer j.close()
			src, dst := make([]byte, n), make([]byte, n)
			fill(src, 27)
			p, _ := j.ctxs[1].TPT().Register(dst, hal.AccessWrite)
			lose := map[uint64]bool{}
			for _, s := range tc.lose {
				lose[s] = true
			}
			var fc frameCount
			var segs uint64
			j.net.SetFilter(func(src, dst hal.Rank, f []byte) bool {
				h, ok := rdmaHdrOf(f)
				if !ok || hal.FrameType(f[3]) != hal.FrameRDMAWrite {
					fc.other++
					return true
				}
				fc.writes++
				if h.Tid != h.Base {
					fc.redrive++
					return true
				}
				segs = hal.Segments(h.Total, h.Seg)
				i := h.Offset / uint64(h.Seg)
				return !lose[i] && !(tc.tail && i == segs-1)
			})
			start := j.net.Now()
			putOnce(t, j, src, dst, p)
			lost := len(tc.lose)
			if tc.tail {
				lost++
			}
			st := j.ctxs[0].RDMAStats()
			t.Logf("%d segments, %d lost: %d write frames (%d resent), %d others; stats %+v; %v",
				segs, lost, fc.writes, fc.redrive, fc.other, st, j.net.Now().Sub(start))
			if fc.redrive != lost || st.Resent != uint64(lost) {
				t.Errorf("%d frames resent (Resent %d), want the %d lost", fc.redrive, st.Resent, lost)
			}
			if fc.writes != int(segs)+lost {
				t.Errorf("%d write frames for %d segments and %d losses", fc.writes, segs, lost)
			}
			if st.Probes != tc.probes || st.Reports == 0 {
				t.Errorf("%d probes (want %d), %d reports", st.Probes, tc.probes, st.Reports)
			}
		})
	}
}

// getOnce gets rank 1's src (at p) into dst at rank 0 of j and runs the
// job until the Get completes, checking the data.
func getOnce(t *testing.T, j *simJob, dst, src []byte, p hal.PVO) {
	t.Helper()
	k := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Get(1, p, dst, SendOpts{Origin: k}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, nil, func() bool { return k.Value() >= 1 })
	if k.err != nil {
		t.Fatal(k.err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("the data got differs from the target's")
	}
}

// TestRDMAGoodputUnderLoss: 16 MiB of Puts and Gets (1 MiB each, taking
// turns) under 1% loss of every frame (each way) take, counted in frames
// on the wire, within 4% of what the same transfers take without loss: a
// chunk that lost a packet resends that packet, not the chunk (which at
// 745 packets nearly every chunk would, doubling the frames), and a read
// asks for the packets it lost, not the range from the first to the last.
// Frames are counted as the ranks send them, lost or not. Seeded: every
// run is the same run.
func TestRDMAGoodputUnderLoss(t *testing.T) {
	const n, ops = 1 << 20, 16
	frames := func(loss float64, seed uint64) (total int, st RDMAStats) {
		j := newRDMAJobCfg(t, 2, faults.Spec{Loss: loss, Seed: seed}, nil, simnet.WithMTU(1500))
		defer j.close()
		src, dst := make([]byte, n), make([]byte, n)
		p, _ := j.ctxs[1].TPT().Register(dst, hal.AccessRead|hal.AccessWrite)
		for i := range ops {
			fill(src, seed*100+uint64(i))
			if i%2 == 0 {
				putOnce(t, j, src, dst, p)
			} else {
				copy(dst, src)
				getOnce(t, j, make([]byte, n), dst, p)
			}
		}
		for _, c := range j.ctxs {
			total += int(c.Stats().PacketsSent)
		}
		return total, j.ctxs[0].RDMAStats()
	}
	base, _ := frames(0, 1)
	for seed := uint64(1); seed <= 3; seed++ {
		lossy, st := frames(0.01, seed)
		ratio := float64(base) / float64(lossy)
		t.Logf("seed %d: %d frames lossless, %d at 1%% loss: goodput %.3f of lossless; redrives %d (reports %d, probes %d), %d packets resent",
			seed, base, lossy, ratio, st.Redrives, st.Reports, st.Probes, st.Resent)
		if ratio < 0.96 {
			t.Errorf("seed %d: goodput %.3f of lossless, want at least 0.96", seed, ratio)
		}
		if st.Redrives == 0 {
			t.Errorf("seed %d: no redrive: the loss did not bite", seed)
		}
	}
}

// TestRDMAPushPolls: a rank pushing a window of RDMA (8 MiB, ~6,000
// packets at MTU 1500) takes what its peer sent meanwhile after a slab
// of packets, not after the whole queue: the acknowledgement of the
// peer's message leaves among the first slabs of RDMA packets.
func TestRDMAPushPolls(t *testing.T) {
	const n = 8 << 20
	j := newRDMAJobCfg(t, 2, faults.Spec{Seed: 1}, func(c *Config) { c.AckEvery = 1 }, simnet.WithMTU(1500))
	defer j.close()
	h := j.ctxs[0].RegisterHandler(&sink{buf: make([]byte, 64)})
	j.ctxs[1].RegisterHandler(&sink{buf: make([]byte, 64)})
	dst := make([]byte, n)
	p, _ := j.ctxs[1].TPT().Register(dst, hal.AccessWrite)
	rdmaBefore, ackAt := 0, -1
	j.net.SetFilter(func(src, _ hal.Rank, f []byte) bool {
		switch {
		case src != 0:
		case hal.FrameType(f[3]) == hal.FrameRDMAWrite:
			rdmaBefore++
		case hal.FrameType(f[3]) == hal.FrameData && ackAt < 0:
			ackAt = rdmaBefore
		}
		return true
	})
	// The peer's message is at rank 0's device when its push begins.
	if err := j.ctxs[1].Amsend(0, h, nil, []byte("ping"), SendOpts{}); err != nil {
		t.Fatal(err)
	}
	j.advance(time.Millisecond)
	src := make([]byte, n)
	fill(src, 5)
	putOnce(t, j, src, dst, p)
	t.Logf("rank 0's first frame toward rank 1 other than RDMA data left after %d of %d RDMA packets", ackAt, rdmaBefore)
	if ackAt < 0 || ackAt > 2*rdmaHdrSlab {
		t.Fatalf("the acknowledgement left after %d RDMA packets, want at most %d", ackAt, 2*rdmaHdrSlab)
	}
}

// TestRDMALateCompletion: a write whose completion comes late, after its
// timer ran out and a probe went, ends with that completion: it answers
// an earlier drive of the same transfer, every byte of which is placed,
// and the probe's own answer (lost here) is not waited for.
func TestRDMALateCompletion(t *testing.T) {
	const n = 1 << 20
	j := newRDMAJobCfg(t, 2, faults.Spec{Seed: 1}, nil, simnet.WithMTU(1500))
	defer j.close()
	src, dst := make([]byte, n), make([]byte, n)
	fill(src, 8)
	p, _ := j.ctxs[1].TPT().Register(dst, hal.AccessWrite)
	var late []byte
	probed, injected := false, false
	j.net.SetFilter(func(from, _ hal.Rank, f []byte) bool {
		h, ok := rdmaHdrOf(f)
		switch {
		case !ok:
			return true
		case hal.FrameType(f[3]) == hal.FrameRDMAWrite && h.Tid != h.Base:
			probed = true
		case hal.FrameType(f[3]) == hal.FrameRDMADone && from == 1 && h.Tid == h.Base && late == nil:
			late = append([]byte(nil), f...) // held back
			return false
		case hal.FrameType(f[3]) == hal.FrameRDMADone && from == 1 && h.Tid != h.Base:
			return false // the probe's answer is lost
		}
		return true
	})
	k := j.ctxs[0].NewCounter()
	if err := j.ctxs[0].Put(1, p, src, SendOpts{Completion: k}); err != nil {
		t.Fatal(err)
	}
	j.run(time.Minute, func() {
		if probed && late != nil && !injected {
			injected = true
			j.net.Inject(1, 0, late)
		}
	}, func() bool { return k.Value() >= 1 })
	st := j.ctxs[0].RDMAStats()
	if !bytes.Equal(dst, src) || st.Probes != 1 || st.Redrives != 1 || st.StaleCompletions != 0 {
		t.Fatalf("data equal %v; probes %d, redrives %d, stale completions %d: want 1, 1, 0",
			bytes.Equal(dst, src), st.Probes, st.Redrives, st.StaleCompletions)
	}
}
