package lapi

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/track"
)

// above is the line above the caller's, for the sites a test expects.
func above() string {
	_, _, l, _ := runtime.Caller(1)
	return strconv.Itoa(l - 1)
}

// TestTrack: with Config.Track, a Put and a Get are recorded from their
// call until they complete, with the test's line, as is a registration
// the test makes until it deregisters it; a Get's own registration of its
// destination is lapi's, and not recorded.
func TestTrack(t *testing.T) {
	regs := []*track.Registry{track.New(), track.New()}
	j := newRDMAJobCfg(t, 2, faults.Spec{}, func(c *Config) { c.Track = regs[c.Rank] })
	defer j.close()
	org, tgt := j.ctxs[0], j.ctxs[1]
	mem := make([]byte, 100_000)
	p, err := tgt.TPT().Register(mem, hal.AccessRead|hal.AccessWrite)
	regLine := above()
	if err != nil {
		t.Fatal(err)
	}
	k := org.NewCounter()
	err = org.Put(1, p, make([]byte, 70_000), SendOpts{Completion: k})
	putLine := above()
	if err != nil {
		t.Fatal(err)
	}
	err = org.Get(1, p, make([]byte, 30_000), SendOpts{Origin: k})
	getLine := above()
	if err != nil {
		t.Fatal(err)
	}
	want := map[*track.Registry]string{
		regs[0]: "2 resources leaked: RDMA Put of 70000 bytes to rank 1 (rCxts in flight) created at track_test.go:" + putLine +
			"; RDMA Get of 30000 bytes to rank 1 (rCxts in flight) created at track_test.go:" + getLine,
		regs[1]: "1 resource leaked: registration of 100000 bytes created at track_test.go:" + regLine,
	}
	for i, r := range regs {
		if got := track.Report(r.Leaks()); got != want[r] {
			t.Errorf("rank %d in flight:\n%s\nwant\n%s", i, got, want[r])
		}
	}
	j.run(time.Second, nil, func() bool { return k.Value() >= 2 })
	if err := k.Wait(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if n := regs[0].Len(); n != 0 {
		t.Errorf("rank 0 after completion: %s", track.Report(regs[0].Leaks()))
	}
	if err := tgt.TPT().Deregister(p); err != nil {
		t.Fatal(err)
	}
	if n := regs[1].Len(); n != 0 {
		t.Errorf("rank 1 after Deregister: %s", track.Report(regs[1].Leaks()))
	}
}
