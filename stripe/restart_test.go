package stripe

import (
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/internal/simnet"
)

// failOnce is a member device whose next Send fails with a device error
// when armed (a transient NIC error).
type failOnce struct {
	hal.Device
	armed bool
}

// stripesFailingOnce makes a stripe per rank of f whose rank 0's member 1
// fails one Send once its failOnce is armed.
func (f *fabric) stripesFailingOnce(t *testing.T) ([]*Device, *failOnce) {
	var flaky *failOnce
	s := f.stripesOver(t, testOpts, func(r hal.Rank, i int, d hal.Device) hal.Device {
		if r == 0 && i == 1 {
			flaky = &failOnce{Device: d}
			return flaky
		}
		return d
	})
	return s, flaky
}

var errInjected = errors.New("injected transient device error")

func (f *failOnce) Send(hdr, payload []byte) error {
	if f.armed {
		f.armed = false
		return errInjected
	}
	return f.Device.Send(hdr, payload)
}

// restartRank kills rank r's devices on every network and opens a new
// stripe over their restarts (a restarted process), connected both ways.
func restartRank(t *testing.T, f *fabric, s []*Device, r hal.Rank, opts Options) *Device {
	t.Helper()
	s[r].Close()
	var devs []hal.Device
	for _, n := range f.nets {
		n.Kill(r)
		d, err := n.Restart(r)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
	}
	o := opts
	o.Rank, o.JobKey, o.Now = r, simnet.DefaultJobKey, f.now
	ns, err := New(devs, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	s[r] = ns
	for p := range s {
		if hal.Rank(p) == r {
			continue
		}
		if err := ns.Connect(hal.Rank(p), s[p].Addr()); err != nil {
			t.Fatal(err)
		}
		if err := s[p].Connect(r, ns.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// TestRejoinAfterPeerRestart: a member of rank 0 that has a transient
// device error is taken out and rejoins rank 1 (hal.Reintegration.Rejoin).
// Once, in rank 1's first life; then rank 1 restarts as a whole (a new
// process: a new stripe over new devices at the same addresses, which
// lapi's own reintegration joins), and the same happens again: the member
// comes back in toward the new life of rank 1 as it did toward the old
// one, although rank 0's member knew rank 1's member by its earlier
// incarnation.
func TestRejoinAfterPeerRestart(t *testing.T) {
	f := newFabric(t, 2, []faults.Spec{{Seed: 1}, {Seed: 2}})
	s, flaky := f.stripesFailingOnce(t)
	x := newMesh(t, f, s)
	start := f.now()
	x.run(start.Add(20*time.Millisecond), func(time.Time) {})
	flaky.armed = true
	x.run(f.now().Add(60*time.Millisecond), func(time.Time) {})
	if got := s[0].Link(1, 1); got != LinkIn || s[0].Member(1).Outs != 1 {
		t.Fatalf("first life: rank 0's member 1 toward rank 1 is %v after a transient error: %v; want out once and back in", got, s[0].Member(1))
	}
	restartRank(t, f, s, 1, testOpts)
	x.run(f.now().Add(20*time.Millisecond), func(time.Time) {})
	flaky.armed = true
	x.run(f.now().Add(500*time.Millisecond), func(time.Time) {})
	if got := s[0].Link(1, 1); got != LinkIn {
		t.Errorf("rank 1 restarted: rank 0's member 1 toward it is %v 500ms after a transient error, want back in; %v", got, s[0].Member(1))
		t.Logf("rank 0's member 1 holds rank 1's incarnation %#x; rank 1's new member 1 is %#x and answers with %#x; rank 1's link: %v",
			s[0].members[1].reint.PeerEpoch(1), s[1].members[1].reint.Epoch(), s[1].members[1].reint.Epoch(), s[1].Link(1, 0))
	}
}

// TestDeafReportAfterPeerRestart: a link that fails in one direction is
// out at both ends within Silence plus a probe interval (doc.go): the
// receiving end by silence, the sending end by the receiver's probes
// reporting it deaf. That holds toward a peer that restarted as a whole
// (its probe rounds start again from 1, under a new life) as toward any
// other.
func TestDeafReportAfterPeerRestart(t *testing.T) {
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
