package lapi

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
	"github.com/weft-hpc/weft/internal/faults"
	"github.com/weft-hpc/weft/transport/shm"
)

// TestCloseAfterBarrierUnderLoss: two ranks end with a barrier (an
// address exchange) and close at once, over a link losing 30% of the
// frames each way. The one that leaves first must not take with it what
// the other still needs, its barrier message or the acknowledgement of
// the other's: Close drains what it sent and answers what the peer
// resends until the link is quiet. Without that, the peer waits in the
// barrier for a message that never comes, or resends to a closed rank
// until it declares it failed.
func TestCloseAfterBarrierUnderLoss(t *testing.T) {
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		ctxs := openInprocJob(t, 2, faults.Spec{Loss: 0.3, Seed: uint64(round + 1)}, func(c *Config) {
			c.PeerTimeout = 2 * time.Second
		})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r, c := range ctxs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				// A little traffic first, so the barrier's packets are
				// not the only ones.
				if _, err := c.AddressInit(ctx, []byte{byte(r)}); err != nil {
					errs[r] = err
					return
				}
				if _, err := c.AddressInit(ctx, nil); err != nil {
					errs[r] = err
					return
				}
				c.Close()
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d: rank %d: %v", round, r, err)
			}
		}
	}
}

// countHandler counts the messages delivered to it.
type countHandler struct{ n atomic.Int32 }

func (h *countHandler) OnHeader(hal.Rank, []byte, int) ([]byte, any) { return nil, nil }
func (h *countHandler) OnComplete(hal.Rank, any)                     { h.n.Add(1) }

// TestCloseFlushesQueued: over a reliable device, messages lapi queued
// because the device was full still go when the rank closes right after
// sending them (a rank's last barrier message at Finalize): Close sends
// them before it lets go of the device, and the peer gets every one.
func TestCloseFlushesQueued(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shm needs Linux")
	}
	const key, msgs = 0xc105e, 40
	devs, err := shm.OpenLocal(key, 2, shm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	full := &fullDevice{Device: devs[0], typ: hal.FrameData, refuse: 1000} // more than the sends try: all stay queued
	var ctxs [2]*Context
	for r, d := range []hal.Device{full, devs[1]} {
		for q, e := range devs {
			if err := d.Connect(hal.Rank(q), e.Addr()); err != nil {
				t.Fatal(err)
			}
		}
		if ctxs[r], err = Open(Config{Device: d, Rank: hal.Rank(r), Size: 2, JobKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	got := &countHandler{}
	ctxs[0].RegisterHandler(&countHandler{})
	h := ctxs[1].RegisterHandler(got)
	stop := serving(ctxs[1])
	for i := range msgs {
		if err := ctxs[0].Amsend(1, h, nil, []byte{byte(i)}, SendOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	ctxs[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = ctxs[1].Wait(ctx, func() (bool, error) { return got.n.Load() == msgs, nil })
	stop()
	ctxs[1].Close()
	if err != nil || got.n.Load() != msgs {
		t.Fatalf("the peer got %d of %d messages the closing rank had queued (%v)", got.n.Load(), msgs, err)
	}
}
