package mpi

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/inproc"
)

// holdOne is a reliable device that does not keep order: armed, it holds
// back the next data frame it is asked to send until release.
type holdOne struct {
	hal.Device
	mu    sync.Mutex
	armed bool
	held  []byte
}

func (d *holdOne) Caps() hal.Caps {
	c := d.Device.Caps()
	c.Ordered = false
	return c
}

func (d *holdOne) Send(hdr, payload []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed && len(hdr) >= hal.HeaderLen && hal.FrameType(hdr[3]) == hal.FrameData {
		d.armed = false
		d.held = append(append([]byte(nil), hdr...), payload...)
		return nil
	}
	return d.Device.Send(hdr, payload)
}

// release sends the frame held back.
func (d *holdOne) release() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.held
	d.held = nil
	if err := d.Device.Send(f[:hal.HeaderLen], f[hal.HeaderLen:]); err != nil {
		return err
	}
	return d.Device.Flush()
}

// TestHeldRendezvousReleasedByWholeMessage: a rendezvous request (RTS)
// that overtook the eager message sent before it is held back until that
// message comes; when the message is one that lapi hands over whole
// (OnWhole), the held rendezvous, matched to a receive already posted,
// must still have its read started. Found under WEFT_FAULTS with several
// goroutines per rank (TestGoroutinesPerRank), where the read waited for
// the next message's completion, which at the end of an exchange never
// came.
func TestHeldRendezvousReleasedByWholeMessage(t *testing.T) {
	const key = 0x5eed
	fab := inproc.NewFabric(2, key)
	worlds := make([]*World, 2)
	var hold *holdOne
	for r := range worlds {
		dev, err := fab.Open(lapi.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		if r == 0 {
			hold = &holdOne{Device: dev}
			dev = hold
		}
		lc, err := lapi.Open(lapi.Config{Device: dev, Rank: lapi.Rank(r), Size: 2, JobKey: key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lc.Close() })
		if worlds[r], err = newWorld(lc, envOptions(t), nil); err != nil {
			t.Fatal(err)
		}
	}
	c0, c1, w1 := worlds[0].comm, worlds[1].comm, worlds[1]
	const eagerTag, rvTag = 1, 2
	big := message(0, 1, 8*(worlds[0].eagerLimit/8+1024)) // rendezvous
	rq, err := Irecv(c1, make([]int64, len(big)), 0, rvTag)
	if err != nil {
		t.Fatal(err)
	}
	eq, err := Irecv(c1, make([]int64, 1), 0, eagerTag)
	if err != nil {
		t.Fatal(err)
	}

	hold.mu.Lock()
	hold.armed = true
	hold.mu.Unlock()
	if err := Send(c0, message(0, 0, 8), 1, eagerTag); err != nil { // held back
		t.Fatal(err)
	}
	sq, err := Isend(c0, big, 1, rvTag) // its RTS goes first
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1 takes the RTS, whole, and holds it back behind the eager
	// message it has not seen.
	for deadline := time.Now().Add(10 * time.Second); ; {
		w1.lc.Progress()
		ready := false
		w1.lc.Atomically(func(*lapi.Tx) {
			w1.mu.Lock()
			ready = len(w1.m.held) == 1
			for _, a := range w1.m.held {
				ready = ready && a.complete
			}
			w1.mu.Unlock()
		})
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 1 never held the rendezvous back")
		}
	}
	worlds[0].lc.Atomically(func(*lapi.Tx) { err = hold.release() }) // the device is driven inside lapi's dispatcher
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		_, err := sq.WaitContext(ctx)
		sent <- err
	}()
	if _, err := eq.WaitContext(ctx); err != nil {
		t.Fatalf("eager receive: %v", err)
	}
	if _, err := rq.WaitContext(ctx); err != nil {
		t.Fatalf("rendezvous receive, released by the eager message: %v", err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("rendezvous send: %v", err)
	}
}
