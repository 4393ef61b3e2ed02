package stripe

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// A link that fails in one direction is out at both ends within Silence
// plus a probe interval (doc.go): the receiving end by silence, the
// sending end by the receiver's probes reporting it deaf. That must hold
// toward a peer that restarted as a whole (its probe rounds start again
// from 1) as toward any other.
func TestRevDeafReportAfterPeerRestart(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s := f.stripes(t, testOpts)
	x := newMesh(t, f, s)
	x.run(f.now().Add(250*time.Millisecond), func(time.Time) {}) // rank 1's first life: 50 probe rounds
	restartRank(t, f, s, 1, testOpts)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	cutAt := f.now()
	f.nets[1].Cut(0, 1) // rank 0's frames on member 1 no longer reach rank 1
	var outAt [2]time.Time
	x.run(cutAt.Add(200*time.Millisecond), func(now time.Time) {
		for r, p := range [2]hal.Rank{1, 0} {
			if outAt[r].IsZero() && s[r].Link(1, p) != LinkIn {
				outAt[r] = now
			}
		}
	})
	limit := testOpts.Silence + 2*testOpts.Probe
	for r := range 2 {
		if outAt[r].IsZero() || outAt[r].Sub(cutAt) > limit {
			got := "never"
			if !outAt[r].IsZero() {
				got = outAt[r].Sub(cutAt).String()
			}
			t.Errorf("rank %d: member 1 out %s after the one-way cut, want within %v; %v", r, got, limit, s[r].Member(1))
		}
	}
}

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
