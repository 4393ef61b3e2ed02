package lapi

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weft-hpc/weft/internal/faults"
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
