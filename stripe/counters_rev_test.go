package stripe

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// The stripe's drop counters are the members' drops summed: a counter of
// frames dropped so far, which Replace must not make go backwards (the old
// member's drops happened; hal.Counters: every frame received is delivered
// or counted under one drop reason).
func TestRevDropsSurviveReplace(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2, Corrupt: 0.2}})
	s, _ := f.renamedStripes(t, testOpts)
	x := newMesh(t, f, s)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	before := s[1].Counters().Drops[hal.DropCRC].Load()
	if before == 0 {
		t.Fatal("no corrupted frame dropped: the fault was not injected")
	}
	if err := f.nets[1].Kill(1); err != nil {
		t.Fatal(err)
	}
	dev, err := f.nets[1].Restart(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s[1].Replace(1, rename(dev, 2)); err != nil {
		t.Fatal(err)
	}
	after := s[1].Counters().Drops[hal.DropCRC].Load()
	if after < before {
		t.Errorf("rank 1's CRC drops went from %d to %d across Replace: the old member's drops are forgotten", before, after)
	}
}
