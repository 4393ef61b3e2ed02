package lazyreg

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestRevModel drives the cache with random acquires, releases, ticks and
// invalidations of slices of a few buffers and checks after every step
// that each region in flight names registered memory that holds its
// slice, and that the counters match the registrar.
func TestRevModel(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		revModel(t, seed)
		if t.Failed() {
			return
		}
	}
}

func revModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	const frag = 4096
	opt := Options{FragmentSize: frag, MaxPinnedBytes: uint64(rng.IntN(24)+1) * frag, MaxRegions: rng.IntN(12) + 1, MaxIdleTicks: uint64(rng.IntN(3))}
	c, f := newCache(t, opt)
	bufs := [][]byte{aligned(4*frag, frag), aligned(3*frag, frag), aligned(frag+100, 64)}
	type held struct {
		r   Region[uint64]
		mem []byte
	}
	var out []held
	for step := 0; step < 400; step++ {
		switch op := rng.IntN(10); {
		case op < 5:
			b := bufs[rng.IntN(len(bufs))]
			i := rng.IntN(len(b))
			j := i + 1 + rng.IntN(len(b)-i)
			k := len(b)
			if rng.IntN(4) == 0 {
				k = j + rng.IntN(len(b)-j+1)
			}
			m := b[i:j:k]
			r, err := c.Acquire(m)
			if err != nil {
				if !errors.Is(err, ErrOverBudget) {
					t.Fatalf("seed %d step %d: acquire: %v", seed, step, err)
				}
				continue
			}
			out = append(out, held{r, m})
		case op < 8:
			if len(out) == 0 {
				continue
			}
			i := rng.IntN(len(out))
			if err := c.Release(out[i].r); err != nil {
				t.Fatalf("seed %d step %d: release: %v", seed, step, err)
			}
			out = append(out[:i], out[i+1:]...)
		case op < 9:
			if err := c.Tick(); err != nil {
				t.Fatalf("seed %d step %d: tick: %v", seed, step, err)
			}
		default:
			b := bufs[rng.IntN(len(bufs))]
			i := rng.IntN(len(b))
			if err := c.Invalidate(b[i : i+1+rng.IntN(len(b)-i)]); err != nil {
				t.Fatalf("seed %d step %d: invalidate: %v", seed, step, err)
			}
		}
		// Check.
		keys := map[uint64]bool{}
		for _, h := range out {
			live, ok := f.live[h.r.Key]
			if !ok {
				t.Fatalf("seed %d step %d: region in flight names key %d, not registered", seed, step, h.r.Key)
			}
			if h.r.Offset+uint64(len(h.mem)) > uint64(len(live)) || addr(live)+uintptr(h.r.Offset) != addr(h.mem) {
				t.Fatalf("seed %d step %d: region %d+%d of %d bytes at %#x does not hold the %d bytes at %#x",
					seed, step, h.r.Offset, len(h.mem), len(live), addr(live), len(h.mem), addr(h.mem))
			}
			keys[h.r.Key] = true
		}
		var pinned uint64
		for _, m := range f.live {
			pinned += uint64(len(m))
		}
		s := c.Stats()
		if s.PinnedBytes != pinned || s.Regions != len(f.live) || s.InUse != len(keys) {
			t.Fatalf("seed %d step %d: stats %+v, registrar has %d bytes in %d registrations, %d in use",
				seed, step, s, pinned, len(f.live), len(keys))
		}
		if s.PinnedBytes > opt.MaxPinnedBytes || s.Regions > opt.MaxRegions {
			t.Fatalf("seed %d step %d: stats %+v over the bounds %+v", seed, step, s, opt)
		}
	}
	for _, h := range out {
		if err := c.Release(h.r); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(f.live) != 0 {
		t.Fatalf("seed %d: %d registrations left after Close", seed, len(f.live))
	}
}
