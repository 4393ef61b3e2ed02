package mpi

import (
	"testing"
	"time"

	"github.com/weft-hpc/weft/lapi"
)

// TestSendBacklogBounded: a rank that only sends small messages (each
// complete once lapi has copied it) to a peer that is not receiving yet
// stops when maxBacklog packets wait in lapi toward that peer, and goes on
// as the peer takes them: the backlog stays bounded instead of growing
// with the loop, and every message arrives, in order.
func TestSendBacklogBounded(t *testing.T) {
	const msgs, gateAt = 20000, 5000 // the gate opens before the sender is held back
	gate := make(chan struct{})
	most := 0
	err := RunWith(2, Options{NoShmColl: true, Timeout: 30 * time.Second}, func(c *Comm) error {
		buf := []int64{0}
		if c.Rank() == 0 {
			w := c.World()
			for i := range msgs {
				buf[0] = int64(i)
				if err := Send(c, buf, 1, 3); err != nil {
					return err
				}
				w.lc.Atomically(func(tx *lapi.Tx) { most = max(most, tx.Backlog(lapi.Rank(1))) })
				if i == gateAt {
					close(gate)
				}
			}
			return nil
		}
		<-gate
		for i := range msgs {
			if _, err := Recv(c, buf, 0, 3); err != nil {
				return err
			}
			if buf[0] != int64(i) {
				t.Errorf("message %d carried %d", i, buf[0])
				return nil
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("most packets queued toward the receiver: %d (bound %d)", most, maxBacklog)
	if most > maxBacklog+1 {
		t.Errorf("backlog reached %d packets, over the bound %d", most, maxBacklog)
	}
	if most < gateAt/2 {
		t.Errorf("backlog reached only %d packets: the receiver kept up, the bound was not exercised", most)
	}
}
