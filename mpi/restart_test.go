package mpi

import (
	"errors"
	"testing"
	"time"

	"github.com/weft-hpc/weft/lapi"
	"github.com/weft-hpc/weft/transport/inproc"
)

// TestRestartedPeerMessages: rank 1 restarts (new device, new lapi context,
// new World, as a restarted process's Init makes) after the pair has
// exchanged messages. lapi resets the pair's link (resetPeer) and the
// survivor's World stays up, but its per-pair MPI sequence numbers
// (seqOut, m.expect) keep the earlier life's count: the new life numbers
// from 0. A message each way must still be received (before lapi told
// mpi of the restart, the survivor's message waited behind the earlier
// life's count for ever).
func TestRestartedPeerMessages(t *testing.T) {
	const key = 0x5e9
	fab := inproc.NewFabric(2, key)
	opts := envOptions(t)
	opts.Timeout = 2 * time.Second
	open := func(r int, epoch uint64) (*lapi.Context, *World) {
		dev, err := fab.Open(lapi.Rank(r))
		if err != nil {
			t.Fatal(err)
		}
		lc, err := lapi.Open(lapi.Config{Device: dev, Rank: lapi.Rank(r), Size: 2, JobKey: key, Reintegrate: true, Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		w, err := newWorld(lc, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		return lc, w
	}
	lc0, w0 := open(0, 1)
	defer lc0.Close()
	lc1, w1 := open(1, 2)
	joinBoth(t, lc0, lc1)
	// Three messages in the first life.
	exchange := func(a, b *World, what string) error {
		errc := make(chan error, 1)
		go func() {
			buf := []int32{0}
			_, err := Recv(b.Comm(), buf, a.Comm().Rank(), 7)
			if err == nil && buf[0] != 42 {
				err = errors.New("wrong data")
			}
			errc <- err
		}()
		if err := Send(a.Comm(), []int32{42}, b.Comm().Rank(), 7); err != nil {
			return err
		}
		return <-errc
	}
	for range 3 {
		if err := exchange(w0, w1, "first life"); err != nil {
			t.Fatalf("first life: %v", err)
		}
	}
	lc1.Close()
	lc1, w1 = open(1, 99)
	defer lc1.Close()
	joinBoth(t, lc0, lc1)
	for range 2 {
		if err := exchange(w0, w1, "after restart"); err != nil {
			t.Fatalf("0 -> restarted 1: %v", err)
		}
		if err := exchange(w1, w0, "after restart"); err != nil {
			t.Fatalf("restarted 1 -> 0: %v", err)
		}
	}
}

// joinBoth waits for both contexts' joins at once: each makes progress
// for the other's.
func joinBoth(t *testing.T, lcs ...*lapi.Context) {
	t.Helper()
	errc := make(chan error, len(lcs))
	for _, lc := range lcs {
		go func() { errc <- waitJoined(lc, 2*time.Second) }()
	}
	for range lcs {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
