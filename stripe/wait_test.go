package stripe

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
)

// Wait waits on every member: a dead member does not stop it, a frame on a
// live one wakes it, Close wakes it, and it fails when every member is dead.
func TestWaitMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFabric(t, 2, make([]faults.Spec, 2))
		s := f.stripes(t, Options{Probe: -1})
		f.nets[0].Kill(1) // rank 1's member 0 is dead

		woke := make(chan error)
		go func() { woke <- s[1].Wait(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-woke:
			t.Fatalf("Wait with nothing in flight returned %v", err)
		default:
		}
		hdr, payload := msg(0, 1, 1, 8)
		if err := s[0].Send(hdr, payload); err != nil {
			t.Fatal(err)
		}
		hdr, payload = msg(0, 1, 2, 8)
		if err := s[0].Send(hdr, payload); err != nil { // round-robin: on member 1
			t.Fatal(err)
		}
		if err := <-woke; err != nil {
			t.Fatalf("Wait woken by a frame on the live member: %v", err)
		}
		for f.step() {
		}
		if ids := pollIDs(t, s[1]); len(ids) != 1 || ids[0] != 2 {
			t.Errorf("delivered %v, want frame 2 (frame 1 went to the dead member)", ids)
		}
		if m := s[1].Member(0); m.In || m.Reason != ReasonPollError {
			t.Errorf("dead member after Poll: %v, want out for its Poll error", m)
		}

		// Every member dead: Wait fails rather than block for ever.
		f.nets[1].Kill(1)
		if err := s[1].Wait(context.Background()); !errors.Is(err, hal.ErrClosed) || errors.Is(err, context.Canceled) {
			t.Errorf("Wait with every member dead: %v, want the members' hal.ErrClosed", err)
		}

		go func() { woke <- s[0].Wait(context.Background()) }()
		synctest.Wait()
		if err := s[0].Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-woke; !errors.Is(err, hal.ErrClosed) {
			t.Errorf("Wait during Close: %v, want hal.ErrClosed", err)
		}
	})
}

// A Wait in progress when a member is replaced must still wake for a frame
// that arrives on the new member: Wait's contract is "blocks until Poll may
// deliver a frame". Here the waiter is durably blocked while Poll delivers
// a frame that came on the replaced member.
func TestWaitSeesReplacedMember(t *testing.T) {
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
		// The waiter may wake during the rejoin already: only the new
		// member carried frames (no probes), so that shows it too.
		waiterWoke := false
		select {
		case err := <-woke:
			waiterWoke = true
			t.Logf("Wait returned %v during the rejoin", err)
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
		if !waiterWoke {
			select {
			case err := <-woke:
				waiterWoke = true
				t.Logf("Wait returned %v", err)
			default:
			}
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
		if !waiterWoke {
			cancel()
			<-woke
		}

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
