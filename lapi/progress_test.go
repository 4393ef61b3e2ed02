package lapi

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
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
	for i := 0; !c0.rel.sendsQueued(); i++ {
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
	if c0.rel.sendsQueued() {
		t.Error("the wait returned with sends still queued behind a ring that had room")
	}
}

// blockedWaiters waits until one goroutine of c is blocked in the
// device's Wait and sleepers more sleep beside it.
func blockedWaiters(t *testing.T, c *Context, sleepers int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		ok := c.pr.blocking && c.pr.sleepers >= sleepers
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiters never blocked (%d sleeping beside the blocked one wanted)", sleepers)
		}
		runtime.Gosched()
	}
}

// TestLocalCompletionWakesWaiters: what a goroutine completes on its
// own, with no frame, wakes the goroutines of its rank that wait for it,
// one blocked in the device's Wait and one asleep beside it: a message to
// its own rank taken whole (no completion to run), and a send's origin
// counter, which fires when lapi has copied the data.
func TestLocalCompletionWakesWaiters(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(c *Context, h HandlerID, k *Counter) error
	}{
		{"message to self", func(c *Context, h HandlerID, _ *Counter) error {
			return c.Amsend(0, h, nil, []byte("self"), SendOpts{})
		}},
		{"origin counter", func(c *Context, h HandlerID, k *Counter) error {
			return c.Amsend(1, h, nil, []byte("peer"), SendOpts{Origin: k})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctxs := openInprocJob(t, 2, faults.Spec{})
			c := ctxs[0]
			f := &flagWhole{}
			h := c.RegisterHandler(f)
			ctxs[1].RegisterHandler(&flagWhole{})
			k := c.NewCounter()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cond := func() (bool, error) { return f.got.Load() || k.Value() > 0, nil }
			errs := make(chan error, 2)
			for range 2 {
				go func() { errs <- c.Wait(ctx, cond) }()
			}
			blockedWaiters(t, c, 1)
			if err := tc.do(c, h, k); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := <-errs; err != nil || ctx.Err() != nil {
					t.Fatalf("a waiter was not woken (it returned %v after its context ended)", err)
				}
			}
		})
	}
}
