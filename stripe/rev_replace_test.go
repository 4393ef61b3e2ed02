package stripe

import (
	"context"
	"encoding/binary"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// A Wait in progress when a member is replaced must still wake for a frame
// that arrives on the new member: Wait's contract is "blocks until Poll may
// deliver a frame". Here the waiter is durably blocked while Poll delivers
// a frame that came on the replaced member.
func TestRevWaitSeesReplacedMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFabric(t, 2, make([]faults.Spec, 2))
		s, _ := f.renamedStripes(t, Options{Probe: -1, Silence: time.Hour})

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		woke := make(chan error, 1)
		go func() { woke <- s[1].Wait(ctx) }()
		synctest.Wait()
		select {
		case err := <-woke:
			t.Fatalf("Wait with nothing in flight returned %v", err)
		default:
		}

		// Rank 1's member 0 is restarted and put back with Replace.
		if err := f.nets[0].Kill(1); err != nil {
			t.Fatal(err)
		}
		dev, err := f.nets[0].Restart(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := s[1].Replace(0, rename(dev, 2)); err != nil {
			t.Fatal(err)
		}
		// The rejoin runs (on member 0 only: no probes) with the waiter
		// still in its Wait; Poll may run beside Wait.
		for range 1000 {
			if s[0].Link(0, 1) == LinkIn && s[1].Link(0, 0) == LinkIn {
				break
			}
			f.advance(100 * time.Microsecond)
			for _, d := range s {
				if _, err := d.Poll(func(*hal.Header, []byte) {}); err != nil {
					t.Fatal(err)
				}
				d.Flush()
			}
		}
		if s[0].Link(0, 1) != LinkIn || s[1].Link(0, 0) != LinkIn {
			t.Fatalf("member 0 not back in: %v / %v", s[0].Member(0), s[1].Member(0))
		}
		select {
		case err := <-woke:
			t.Skipf("the waiter woke during the rejoin (%v): nothing shown", err)
		default:
		}

		// A data frame from rank 0 on network 0: it reaches rank 1's new
		// member 0.
		hdr, payload := msg(0, 1, 42, 8)
		if err := f.nets[0].Inject(0, 1, append(hdr, payload...)); err != nil {
			t.Fatal(err)
		}
		for f.step() {
		}
		synctest.Wait()
		waiterWoke := false
		select {
		case err := <-woke:
			waiterWoke = true
			t.Logf("Wait returned %v", err)
		default:
		}
		var got []uint64
		if _, err := s[1].Poll(func(h *hal.Header, p []byte) { got = append(got, binary.LittleEndian.Uint64(p)) }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != 42 {
			t.Fatalf("Poll delivered %v, want frame 42 (the test's premise)", got)
		}
		if !waiterWoke {
			t.Errorf("a Wait begun before Replace stayed blocked while Poll had frame 42 of the new member to deliver")
		}
		cancel()
		<-woke

		// Control: a Wait begun after Replace does see the new member.
		hdr, payload = msg(0, 1, 43, 8)
		if err := f.nets[0].Inject(0, 1, append(hdr, payload...)); err != nil {
			t.Fatal(err)
		}
		for f.step() {
		}
		if err := s[1].Wait(context.Background()); err != nil {
			t.Errorf("control: a Wait begun after Replace, with frame 43 waiting on the new member: %v", err)
		}
	})
}
