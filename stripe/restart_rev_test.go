package stripe

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// MemberStats: "Reason is why it was last taken out toward one, Err the
// device error that did it (nil for the others)". A member taken out once
// for a transient device error, back in, then taken out for silence must
// report Reason silence (or peer-deaf) with no device error.
func TestRevMemberErrAfterLaterOut(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	var flaky *failOnce
	s := f.stripesOver(t, testOpts, func(r hal.Rank, i int, d hal.Device) hal.Device {
		if r == 0 && i == 1 {
			flaky = &failOnce{Device: d}
			return flaky
		}
		return d
	})
	x := newMesh(t, f, s)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	flaky.armed = true
	x.run(f.now().Add(60*time.Millisecond), func(time.Time) {})
	if m := s[0].Member(1); !m.In || m.Outs != 1 || m.Reason != ReasonSendError {
		t.Fatalf("after a transient error: %v, want out once for send-error and back in", m)
	}
	f.nets[1].Isolate(1)
	x.run(f.now().Add(60*time.Millisecond), func(time.Time) {})
	m := s[0].Member(1)
	if m.In || m.Reason == ReasonSendError || m.Reason == ReasonPollError {
		t.Fatalf("after the isolation: %v, want out for silence or the peer's report", m)
	}
	if m.Err != nil {
		t.Errorf("member out for %v reports device error %q, from an earlier outage: want nil", m.Reason, m.Err)
	}
}
