package lapi

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/simnet"
)

// TestThirdParty: rank 0 asks rank 1 to write a region of its own into
// rank 2's, and to read rank 2's into its own, under the hostile
// simulated network, for small (packets) and large (RDMA) sizes and with
// rank 0 itself as the carrier: the bytes land exact, and each counter —
// the asker's completion, the carrier's and (for a write) the other
// rank's target counter — fires exactly once. The carrier recycles its
// own counters: many transfers do not grow its counter table by one each.
func TestThirdParty(t *testing.T) {
	for _, n := range []int{3000, 300 << 10} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%dB/seed%d", n, seed), func(t *testing.T) {
				spec := rough
				spec.Seed = seed
				j := newSimJob(t, 3, spec, simnet.WithMTU(16<<10))
				j.requireFaults()
				defer j.close()
				bufs := make([][]byte, 3)
				pvos := make([]hal.PVO, 3)
				for r, c := range j.ctxs {
					bufs[r] = make([]byte, n)
					copy(bufs[r], pattern[r*1000:])
					pvos[r], _ = c.TPT().Register(bufs[r], hal.AccessRead|hal.AccessWrite)
				}
				want1 := bytes.Clone(bufs[1])
				tables := len(j.ctxs[1].am.counters)
				// Packet-sized transfers are few frames: several
				// passes, so that every fault of the spec bites.
				passes := 1
				if n < 16<<10 {
					passes = 4
				}
				for i := range 4 * passes {
					round := i % 4
					write := round%2 == 0
					by := hal.Rank(1)
					if round == 3 {
						by = 0 // the asker carries it out itself
					}
					other := hal.Rank(2)
					done := j.ctxs[0].NewCounter()
					byCntr, otherCntr := j.ctxs[by].NewCounter(), j.ctxs[other].NewCounter()
					if err := j.ctxs[0].ThirdParty(by, pvos[by], other, pvos[other], uint64(n), write,
						ThirdPartyOpts{Completion: done, ByTarget: byCntr.ID(), OtherTarget: otherCntr.ID()}); err != nil {
						t.Fatal(err)
					}
					j.run(time.Minute, nil, func() bool { return settled(done, 1) && settled(byCntr, 1) })
					if done.err != nil {
						t.Fatalf("round %d: %v", round, done.err)
					}
					var wantOther int64
					if write {
						wantOther = 1
						j.run(time.Minute, nil, func() bool { return settled(otherCntr, 1) })
					}
					if done.Value() != 1 || byCntr.Value() != 1 || otherCntr.Value() != wantOther {
						t.Errorf("round %d: counters asker %d, carrier %d, other %d; want 1, 1, %d",
							round, done.Value(), byCntr.Value(), otherCntr.Value(), wantOther)
					}
					switch {
					case round == 0 && !bytes.Equal(bufs[2], want1):
						t.Fatalf("write: rank 2's region is not rank 1's")
					case round == 1 && !bytes.Equal(bufs[1], want1):
						// rank 2 holds rank 1's bytes since round 0: a read gives them back
						t.Fatalf("read: rank 1's region is not what rank 2 held")
					case round == 3 && !bytes.Equal(bufs[0], bufs[2]):
						t.Fatalf("read by the asker: rank 0's region is not rank 2's")
					}
				}
				if grew := len(j.ctxs[1].am.counters) - tables; grew > 3*passes+1 {
					t.Errorf("the carrier's counter table grew by %d over %d transfers, %d of them the test's: its own are not recycled", grew, 3*passes, 3*passes)
				}
			})
		}
	}
}

// TestThirdPartyRefused: a request naming a region the carrier never
// registered, one beyond its region's end, and one that needs write access
// to a read-only region fail at the asker with ErrProtection naming the
// check; a request toward a rank out of range is refused at once.
func TestThirdPartyRefused(t *testing.T) {
	j := newSimJob(t, 3, hostile)
	j.requireFaults()
	defer j.close()
	j.stir(2000) // its own traffic is a few frames
	buf := make([]byte, 4096)
	ro, _ := j.ctxs[1].TPT().Register(buf, hal.AccessRead)
	dst := make([]byte, 8192)
	rw, _ := j.ctxs[2].TPT().Register(dst, hal.AccessRead|hal.AccessWrite)
	bogus := ro
	bogus.Key ^= 0x5a5a
	for _, c := range []struct {
		name  string
		local hal.PVO
		n     uint64
		write bool
		check string
	}{
		{"stale key", bogus, 100, true, "key"},
		{"past the end", ro, 8192, true, "bounds"},
		{"read into a read-only region", ro, 100, false, "access"},
	} {
		done := j.ctxs[0].NewCounter()
		if err := j.ctxs[0].ThirdParty(1, c.local, 2, rw, c.n, c.write, ThirdPartyOpts{Completion: done}); err != nil {
			t.Fatal(err)
		}
		j.run(time.Minute, nil, func() bool { return settled(done, 1) })
		if !errors.Is(done.err, ErrProtection) || !bytes.Contains([]byte(done.err.Error()), []byte(c.check)) {
			t.Errorf("%s: %v, want ErrProtection naming the %s check", c.name, done.err, c.check)
		}
	}
	if err := j.ctxs[0].ThirdParty(1, ro, 9, rw, 10, true, ThirdPartyOpts{}); !errors.Is(err, ErrBadRank) {
		t.Errorf("other rank 9 of 3: %v", err)
	}
	if err := j.ctxs[0].ThirdParty(1, ro, 1, rw, 10, true, ThirdPartyOpts{}); !errors.Is(err, ErrBadRank) {
		t.Errorf("a carrier copying to itself: %v", err)
	}
}
