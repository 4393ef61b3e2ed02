package lapi

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// flagWhole is a WholeHandler that raises a flag for every message.
type flagWhole struct{ got atomic.Bool }

func (f *flagWhole) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (f *flagWhole) OnComplete(hal.Rank, any)                     { f.got.Store(true) }
func (f *flagWhole) OnWhole(hal.Rank, []byte, []byte) bool {
	f.got.Store(true)
	return true
}

// TestWaitEndingInPollSendsQueued: a wait whose condition the frame it
// polls meets returns before the rest of the pass only when that rest has
// nothing to do. Sends queued behind a full ring still go in that pass,
// not at some later call.
func TestWaitEndingInPollSendsQueued(t *testing.T) {
	ctxs := openShmJob(t, 2)
	c0, c1 := ctxs[0], ctxs[1]
	f0, f1 := &flagWhole{}, &flagWhole{}
	h := c0.RegisterHandler(f0)
	if h1 := c1.RegisterHandler(f1); h1 != h {
		t.Fatalf("handler ids %d and %d", h, h1)
	}
	msg := make([]byte, 8)
	for i := 0; !c0.sendsQueued(); i++ {
		if i == 1<<16 {
			t.Fatal("the ring to rank 1 never filled")
		}
		if err := c0.Amsend(1, h, nil, msg, SendOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 {
		c1.Progress() // room in the ring again
	}
	if err := c1.Amsend(0, h, nil, msg, SendOpts{}); err != nil {
		t.Fatal(err)
	}
	if f0.got.Load() {
		t.Fatal("rank 0 had its message before it waited")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c0.Wait(ctx, func() (bool, error) { return f0.got.Load(), nil }); err != nil {
		t.Fatal(err)
	}
	if c0.sendsQueued() {
		t.Error("the wait returned with sends still queued behind a ring that had room")
	}
}
