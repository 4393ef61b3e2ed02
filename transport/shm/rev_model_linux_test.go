package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

// TestRevRingModel: one goroutine interleaves Sends, SendShorts and
// Polls of random sizes over small geometries; every accepted frame must
// arrive once, in order, intact.
func TestRevRingModel(t *testing.T) {
	line := cacheLine()
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		cells := 2 << rng.IntN(6)
		cs := line << rng.IntN(3)
		mtu := []int{64, 300, 1500, 9000, hal.MaxPayload}[rng.IntN(5)]
		need := 2 * frameSpan(hal.HeaderLen+mtu, line)
		rb := 1
		for rb < need {
			rb <<= 1
		}
		rb <<= rng.IntN(2)
		opts := Options{Cells: cells, CellSize: cs, MTU: mtu, RingBytes: rb, PollBatch: 1 + rng.IntN(5)}
		revRingModel(t, seed, rng, opts)
		if t.Failed() {
			return
		}
	}
}

func revRingModel(t *testing.T, seed uint64, rng *rand.Rand, opts Options) {
	devs, key := openLocal(t, 2, opts)
	tx, rx := devs[0], devs[1]
	mtu := tx.Caps().MTU
	var sentSeq, gotSeq uint64
	buf := make([]byte, hal.HeaderLen+mtu)
	var bad error
	check := func(h *hal.Header, p []byte) {
		if bad != nil {
			return
		}
		if len(p) < 8 {
			bad = fmt.Errorf("frame %d: %d bytes", gotSeq, len(p))
			return
		}
		s := binary.LittleEndian.Uint64(p)
		w := make([]byte, len(p)-8)
		fill(w, s)
		if s != gotSeq || string(w) != string(p[8:]) || h.Src != 0 || h.Dst != 1 || int(h.Len) != len(p) {
			bad = fmt.Errorf("got frame seq %d (%d bytes, content ok %v, hdr %+v), want seq %d", s, len(p), string(w) == string(p[8:]), *h, gotSeq)
		}
		gotSeq++
	}
	for step := 0; step < 3000; step++ {
		if rng.IntN(3) == 0 {
			if _, err := rx.Poll(check); err != nil {
				t.Fatalf("seed %d %+v step %d: Poll: %v", seed, opts, step, err)
			}
		} else {
			var n int
			switch rng.IntN(3) {
			case 0:
				n = 8 + rng.IntN(min(mtu, tx.g.inlineMax)-8+1)
			case 1:
				n = 8 + rng.IntN(min(mtu, 8*tx.g.cellStride)-8+1)
			default:
				n = 8 + rng.IntN(mtu-8+1)
			}
			p := buf[hal.HeaderLen : hal.HeaderLen+n]
			binary.LittleEndian.PutUint64(p, sentSeq)
			fill(p[8:], sentSeq)
			var err error
			if n <= tx.ShortMax() && n <= mtu && rng.IntN(2) == 0 {
				err = tx.SendShort(1, hal.FrameData, p[:8], p[8:])
			} else {
				hal.EncodeHeader(buf, &hal.Header{Type: hal.FrameData, Len: uint16(n), JobKey: key, Src: 0, Dst: 1, SrcDev: byte(rng.IntN(2))})
				err = tx.Send(buf[:hal.HeaderLen], p)
			}
			if err == nil {
				sentSeq++
			} else if !errors.Is(err, hal.ErrNoResource) {
				t.Fatalf("seed %d %+v step %d: send of %d: %v", seed, opts, step, n, err)
			}
		}
		if bad != nil {
			t.Fatalf("seed %d %+v step %d: %v", seed, opts, step, bad)
		}
	}
	for i := 0; i < 100000 && gotSeq < sentSeq; i++ {
		if _, err := rx.Poll(check); err != nil {
			t.Fatal(err)
		}
		if bad != nil {
			t.Fatalf("seed %d: %v", seed, bad)
		}
	}
	if gotSeq != sentSeq {
		t.Fatalf("seed %d %+v: sent %d, got %d", seed, opts, sentSeq, gotSeq)
	}
}
