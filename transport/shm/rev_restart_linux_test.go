package shm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/hal"
)

// TestRevRestartedRankOpenFails: doc.go says "Restarting a rank (Open
// again for a rank that was attached) is not supported: its Open fails."
// Once every rank has attached the name is unlinked, so a second Open of
// rank 1 creates a fresh segment under the same name and succeeds; its
// Connect to rank 0 passes (same segment name in the address) and the
// frames it sends go to a ring nobody reads: lost without an error.
func TestRevRestartedRankOpenFails(t *testing.T) {
	key := newJobKey()
	a := mustOpen(t, key, 0, 2, Options{})
	b := mustOpen(t, key, 1, 2, Options{})
	if err := errors.Join(a.Connect(1, b.Addr()), b.Connect(0, a.Addr())); err != nil {
		t.Fatal(err)
	}
	// Rank 1 "restarts": its old device goes (as a killed process's
	// would, nothing marked), and it opens again.
	b2, err := openRank(t, key, 1, 2, Options{})
	if err == nil {
		// Show the consequence: it connects and sends, rank 0 never hears.
		cerr := b2.Connect(0, a.Addr())
		serr := b2.Send(header(key, 1, 0, 8), make([]byte, 8))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		got := 0
		for ctx.Err() == nil && got == 0 {
			n, _ := a.Poll(func(*hal.Header, []byte) {})
			got += n
			_ = a.Wait(ctx)
		}
		t.Fatalf("Open of rank 1, already attached, succeeded (doc: its Open fails); then Connect(0) = %v, Send = %v, and rank 0 received %d frames of it", cerr, serr, got)
	}
	t.Log(err)
}

// TestRevLateRankAfterAbandon: doc.go: "a rank that finds the segment
// already abandoned (unlinked because every earlier rank closed) fails its
// Open rather than sit alone in it". Ranks 0 and 1 of 3 open and close;
// rank 2 then opens without error, alone in a fresh segment.
func TestRevLateRankAfterAbandon(t *testing.T) {
	key := newJobKey()
	a := mustOpen(t, key, 0, 3, Options{})
	b := mustOpen(t, key, 1, 3, Options{})
	a.Close()
	b.Close()
	c, err := openRank(t, key, 2, 3, Options{})
	if err == nil {
		t.Fatalf("rank 2 opened a segment every earlier rank had closed and abandoned: no error, alone in %s (creator %v)", c.seg.path, c.seg.creator)
	}
	t.Log(err)
}
