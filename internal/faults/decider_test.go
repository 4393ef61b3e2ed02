package faults

import (
	"errors"
	"math"
	"testing"

	"github.com/weft-hpc/weft/hal"
)

func TestDeciderDeterministic(t *testing.T) {
	spec := Spec{Loss: 0.2, Reorder: 0.3, Dup: 0.1, Corrupt: 0.1, Seed: 42}
	a, b := NewDecider(spec, Stream(3, 0)), NewDecider(spec, Stream(3, 0))
	other := NewDecider(spec, Stream(4, 0))
	same := 0
	for i := range 1000 {
		da, db, do := a.Decide(100+i), b.Decide(100+i), other.Decide(100+i)
		if da != db {
			t.Fatalf("frame %d: %+v and %+v from the same seed and stream", i, da, db)
		}
		if da == do {
			same++
		}
	}
	if same > 900 {
		t.Errorf("streams of ranks 3 and 4 agree on %d of 1000 verdicts", same)
	}
}

// Raising one rate must not change the verdicts the other rates give.
func TestDeciderRatesIndependent(t *testing.T) {
	a := NewDecider(Spec{Loss: 0.3, Seed: 1}, 0)
	b := NewDecider(Spec{Loss: 0.3, Dup: 0.5, Corrupt: 0.5, Seed: 1}, 0)
	for i := range 1000 {
		if da, db := a.Decide(64), b.Decide(64); da.Drop != db.Drop {
			t.Fatalf("frame %d: drop %v with other rates off, %v with them on", i, da.Drop, db.Drop)
		}
	}
}

func TestDeciderRates(t *testing.T) {
	spec := Spec{Loss: 0.2, Reorder: 0.1, Dup: 0.05, Corrupt: 0.01, Seed: 7}
	d := NewDecider(spec, 0)
	const n = 200_000
	var drop, dup, corrupt, hold float64
	for range n {
		v := d.Decide(200)
		if v.Drop {
			drop++
			continue
		}
		if v.Copies == 2 {
			dup++
			if v.DupHold <= 0 || v.DupHold > spec.MaxDelay() {
				t.Fatalf("duplicate held %v, want in (0, %v]", v.DupHold, spec.MaxDelay())
			}
		}
		if v.CorruptBit >= 0 {
			corrupt++
		}
		if v.Hold > 0 {
			hold++
			if v.Hold > spec.MaxDelay() {
				t.Fatalf("hold %v over the maximum %v", v.Hold, spec.MaxDelay())
			}
		}
	}
	kept := n - drop
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"loss", drop / n, spec.Loss}, {"dup", dup / kept, spec.Dup}, {"corrupt", corrupt / kept, spec.Corrupt}, {"reorder", hold / kept, spec.Reorder}} {
		// Five standard deviations of a binomial proportion.
		if tol := 5 * math.Sqrt(c.want*(1-c.want)/kept); math.Abs(c.got-c.want) > tol {
			t.Errorf("%s rate %.4f, want %.4f ± %.4f", c.name, c.got, c.want, tol)
		}
	}
}

func TestDeciderExtremes(t *testing.T) {
	none := NewDecider(Spec{Seed: 5}, 0)
	all := NewDecider(Spec{Dup: 1, Corrupt: 1, Reorder: 1, Seed: 5}, 0)
	for range 10_000 {
		if v := none.Decide(64); v != (Decision{Copies: 1, CorruptBit: -1}) {
			t.Fatalf("all rates zero gave %+v", v)
		}
		if v := all.Decide(64); v.Drop || v.Copies != 2 || v.CorruptBit < 0 || v.Hold <= 0 {
			t.Fatalf("rates of one gave %+v", v)
		}
	}
	if v := NewDecider(Spec{Loss: 1}, 0).Decide(64); !v.Drop || v.Copies != 0 {
		t.Errorf("loss=1 gave %+v", v)
	}
}

// Every injected corruption of a sealed frame is caught as DropCRC, even by
// a receiver that does not demand a CRC, and never changes the destination.
func TestCorruptionIsCaughtByCRC(t *testing.T) {
	d := NewDecider(Spec{Corrupt: 1, Seed: 11}, 0)
	var h hal.Header
	for i := range 20_000 {
		payload := make([]byte, i%70)
		frame := make([]byte, hal.HeaderLen+len(payload))
		hal.EncodeHeader(frame, &hal.Header{Type: hal.FrameData, Len: uint16(len(payload)), JobKey: 9, Src: 1, Dst: 2})
		hal.Seal(frame[:hal.HeaderLen], payload)
		copy(frame[hal.HeaderLen:], payload)
		d.Decide(len(frame)).Corrupt(frame)
		_, err := hal.Check(frame, 9, false, &h)
		var fe *hal.FrameError
		if !errors.As(err, &fe) || fe.Reason != hal.DropCRC {
			t.Fatalf("frame %d (%d-byte payload): Check after corruption: %v, want DropCRC", i, len(payload), err)
		}
		if h.Dst != 2 {
			t.Fatalf("frame %d: corruption changed the destination to %d", i, h.Dst)
		}
	}
}

// Corruption reaches every eligible header byte (device indexes, life, crc,
// job key, source) and the payload, and nothing else.
func TestCorruptionBytes(t *testing.T) {
	d := NewDecider(Spec{Corrupt: 1, Seed: 12}, 0)
	hits := make([]int, hal.HeaderLen+4)
	for range 20_000 {
		hits[d.Decide(len(hits)).CorruptBit/8]++
	}
	for i, n := range hits {
		eligible := i >= 5 && i < 10 || i >= 12 && i < 28 || i >= hal.HeaderLen
		if eligible != (n > 0) {
			t.Errorf("byte %d flipped %d times (eligible %v)", i, n, eligible)
		}
	}
}

// The rates other than Loss apply to the frames not lost, as Spec says:
// per frame offered, loss=0.5 and dup=0.2 duplicate 10%.
func TestRatesOfFramesNotLost(t *testing.T) {
	spec := Spec{Loss: 0.5, Dup: 0.2, Corrupt: 0.2, Reorder: 0.2, Seed: 3}
	d := NewDecider(spec, Stream(0, 0))
	var s Stats
	const n = 200_000
	for range n {
		s.Count(d.Decide(200))
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"loss", float64(s.Dropped.Load()) / n, spec.Loss},
		{"dup", float64(s.Duplicated.Load()) / n, spec.Dup * (1 - spec.Loss)},
		{"reorder", float64(s.Delayed.Load()) / n, spec.Reorder * (1 - spec.Loss)},
	} {
		if tol := 5 * math.Sqrt(c.want*(1-c.want)/n); math.Abs(c.got-c.want) > tol {
			t.Errorf("%s=%v: %.4f of %d frames offered, want %.4f ± %.4f", c.name, c.want, c.got, n, c.want, tol)
		}
	}
}

func TestStatsCount(t *testing.T) {
	var s Stats
	s.Count(Decision{Drop: true, CorruptBit: -1})
	s.Count(Decision{Copies: 2, CorruptBit: 40, Hold: 1})
	s.Count(Decision{Copies: 1, CorruptBit: -1})
	if s.Offered.Load() != 3 || s.Dropped.Load() != 1 || s.Duplicated.Load() != 1 ||
		s.Corrupted.Load() != 2 || s.Delayed.Load() != 1 || s.Sent() != 3 {
		t.Errorf("stats %+v", &s)
	}
}
