package stripe

import (
	"strings"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// failOnceB is failOnce for a member that broadcasts.
type failOnceB struct{ failOnce }

func (f *failOnceB) SendBroadcast(hdr, payload []byte) error {
	return f.Device.(hal.Broadcaster).SendBroadcast(hdr, payload)
}

// Every member of rank 0 has had one transient Send error (their devices
// work again at once). The stripe still says Caps.Broadcast, and its
// members broadcast: a SendBroadcast now must either go (as Send does: a
// stripe whose members are all suspect sends on them rather than stall)
// or fail with an error that names the members' device error, not claim
// that no member broadcasts.
func TestRevBroadcastAfterTransientErrors(t *testing.T) {
	f := newFabric(t, 3, make([]faults.Spec, 2))
	var fl []*failOnceB
	s := f.stripesOver(t, testOpts, func(r hal.Rank, i int, d hal.Device) hal.Device {
		if r != 0 {
			return d
		}
		w := &failOnceB{failOnce{Device: d}}
		fl = append(fl, w)
		return w
	})
	for _, w := range fl {
		w.armed = true
	}
	hdr, payload := msg(0, 1, 1, 8)
	err := s[0].Send(hdr, payload)
	t.Logf("Send as both members fail once: %v", err)
	f.advance(time.Millisecond)
	if !s[0].Caps().Broadcast {
		t.Fatal("Caps.Broadcast false")
	}
	bh, bp := mcastFrame(0, 7)
	if err := s[0].SendBroadcast(bh, bp); err != nil && (strings.Contains(err.Error(), "no member broadcasts") || !strings.Contains(err.Error(), errInjected.Error())) {
		t.Errorf("SendBroadcast after a transient error on each member: %v; want it sent, or an error naming the members' error (%v)", err, errInjected)
	}
	// Unicast still goes, on the suspect members.
	hdr, payload = msg(0, 1, 2, 8)
	if err := s[0].Send(hdr, payload); err != nil {
		t.Errorf("Send after the transient errors: %v", err)
	}
}
