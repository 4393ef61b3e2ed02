package stripe

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

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
